// How a trainer reaches the embedding owners: lookups of rows and the step's update.
// LocalEmbeddingService serves owners of this process (tests, one host);
// RemoteEmbeddingService (client.h) sends the same requests to
// embedding-server processes. Consistency (sync / hybrid with staleness bound k) is the
// owners' business: shard_owner.h.
//
// Lookups are split into submit and wait so that a trainer can have the lookups of later
// steps in flight while a step computes (pipelining). Updates never wait for their own
// application; a rejected update fails the trainers' next call to that owner.
#pragma once

#include <chrono>
#include <cstdint>
#include <limits>
#include <memory>
#include <vector>

#include "engine/ps/feature_update.h"
#include "engine/ps/shard_owner.h"
#include "engine/ps/shard_store.h"

namespace dlrm::ps {

// A lookup on its way: Wait returns the request with rows filled, or throws the owner's
// error (or kTimeout). Call Wait at most once.
class PendingLookup {
 public:
  virtual ~PendingLookup() = default;
  virtual std::vector<ShardRows> Wait() = 0;
};

class EmbeddingService {
 public:
  virtual ~EmbeddingService() = default;
  // Starts a lookup of rows of `owner`'s shards for step `step` (>= 1): request[i].ids of
  // shard request[i].shard.
  virtual std::unique_ptr<PendingLookup> SubmitLookup(int32_t owner, int64_t step,
                                                      std::vector<ShardRows> request) = 0;
  // Rank `rank`'s part of step `step`'s update for `owner` (its features, in order). The
  // owner applies a step when every rank's part is in, in step order.
  virtual void Update(int32_t owner, int32_t rank, int64_t step, float lr,
                      std::vector<FeatureUpdate> part) = 0;
  // Blocks until every owner has applied every update up to `step` (end of training, a
  // checkpoint, evaluation); throws an owner's rejection or kTimeout.
  virtual void WaitUntilApplied(int64_t step) = 0;
  // The most bytes a part given to Update may take (FeatureUpdatesBytes, in the service's
  // wire precision): a larger one cannot travel. Unbounded in process.
  virtual int64_t max_update_bytes() const { return std::numeric_limits<int64_t>::max(); }

  // SubmitLookup + Wait.
  std::vector<ShardRows> Lookup(int32_t owner, int64_t step, std::vector<ShardRows> request) {
    return SubmitLookup(owner, step, std::move(request))->Wait();
  }
};

class LocalEmbeddingService : public EmbeddingService {
 public:
  // servers[i] is the store of server i (borrowed). world_size: trainers per step.
  // staleness: the bound k (shard_owner.h). Calls that cannot proceed within `timeout`
  // throw kTimeout.
  LocalEmbeddingService(std::vector<EmbeddingShardStore*> servers, int32_t world_size,
                        int64_t staleness, std::chrono::milliseconds timeout);

  std::unique_ptr<PendingLookup> SubmitLookup(int32_t owner, int64_t step,
                                              std::vector<ShardRows> request) override;
  void Update(int32_t owner, int32_t rank, int64_t step, float lr,
              std::vector<FeatureUpdate> part) override;
  void WaitUntilApplied(int64_t step) override;

  // The largest staleness any owner served (ShardOwner::max_staleness_served).
  int64_t max_staleness_served() const;
  // For tests of hybrid mode: every owner sleeps this long before each apply.
  void set_apply_delay(std::chrono::milliseconds delay);

 private:
  ShardOwner& At(int32_t owner);

  const std::chrono::milliseconds timeout_;
  std::vector<std::unique_ptr<ShardOwner>> owners_;
};

}  // namespace dlrm::ps

// How a trainer reaches the embedding owners: lookups of rows and the step's update.
// LocalEmbeddingService serves stores of this process (tests, one host); the networked
// service sends the same requests to embedding-server processes.
//
// Consistency is the owner's business, set by one number, the staleness bound k: a lookup
// for step s is served once every update of steps <= s - 1 - k has been applied.
//  - k = 0 is `sync`: step s sees every earlier step's update, as in one process.
//  - k > 0 is `hybrid` (PERSIA): trainers may run up to k steps ahead of the embedding
//    updates, which are applied in the background while dense training goes on.
// Updates never wait for their own application; a rejected update fails the trainers'
// next call to that owner.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <thread>
#include <vector>

#include "engine/dist/embedding_shard_store.h"
#include "engine/dist/feature_update.h"

namespace dlrm::dist {

class EmbeddingService {
 public:
  virtual ~EmbeddingService() = default;
  // rows [ids.size() x shard width] of owner's shard `shard` (ids inside its rows), for
  // the lookups of step `step` (>= 1).
  virtual void Lookup(int32_t owner, int32_t shard, int64_t step,
                      const std::vector<int64_t>& ids, std::vector<float>* rows) = 0;
  // Rank `rank`'s part of step `step`'s update for `owner` (its features, in order). The
  // owner applies a step when every rank's part is in, in step order.
  virtual void Update(int32_t owner, int32_t rank, int64_t step, float lr,
                      std::vector<FeatureUpdate> part) = 0;
};

class LocalEmbeddingService : public EmbeddingService {
 public:
  // servers[i] is the store of server i (borrowed). world_size: trainers per step.
  // staleness: the bound k above. Calls that cannot proceed within `timeout` throw
  // kTimeout. A background thread applies the updates.
  LocalEmbeddingService(std::vector<EmbeddingShardStore*> servers, int32_t world_size,
                        int64_t staleness, std::chrono::milliseconds timeout);
  ~LocalEmbeddingService() override;

  void Lookup(int32_t owner, int32_t shard, int64_t step, const std::vector<int64_t>& ids,
              std::vector<float>* rows) override;
  void Update(int32_t owner, int32_t rank, int64_t step, float lr,
              std::vector<FeatureUpdate> part) override;

  // Blocks until every server has applied every update up to `step` (end of training, a
  // checkpoint); throws a server's rejection or kTimeout.
  void WaitUntilApplied(int64_t step);
  // The largest (s - 1) - (last applied step) seen by a lookup for step s: how stale the
  // rows served so far were. Never above the staleness bound.
  int64_t max_staleness_served() const;
  // For tests of hybrid mode: each apply first sleeps this long (a slow server).
  void set_apply_delay(std::chrono::milliseconds delay);

 private:
  struct Pending {
    std::vector<std::vector<FeatureUpdate>> parts;  // by rank
    int32_t arrived = 0;
    float lr = 0;
  };
  struct Owner {
    EmbeddingShardStore* store = nullptr;
    std::shared_mutex rows_mu;  // lookups share, an apply is exclusive
    std::map<int64_t, Pending> pending;  // by step
    int64_t applied = 0;                 // last applied step
    std::string error;                   // set when an update was rejected
  };
  Owner& At(int32_t owner);
  void ApplyLoop();

  const int32_t world_size_;
  const int64_t staleness_;
  const std::chrono::milliseconds timeout_;
  std::vector<std::unique_ptr<Owner>> owners_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<int32_t, int64_t>> ready_;  // (owner, step) with every part in
  int64_t max_staleness_served_ = 0;
  std::chrono::milliseconds apply_delay_{0};
  bool stopping_ = false;
  std::thread applier_;
};

}  // namespace dlrm::dist

// How a trainer reaches the embedding owners: lookups of rows and the step's update.
// LocalEmbeddingService calls stores in this process (tests, one host); the networked
// service sends the same requests to embedding-server processes.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "engine/dist/embedding_shard_store.h"
#include "engine/dist/feature_update.h"

namespace dlrm::dist {

class EmbeddingService {
 public:
  virtual ~EmbeddingService() = default;
  // rows [ids.size() x shard width] of owner's shard `shard` (ids inside its rows).
  virtual void Lookup(int32_t owner, int32_t shard, const std::vector<int64_t>& ids,
                      std::vector<float>* rows) = 0;
  // Rank `rank`'s part of step `step`'s update for `owner` (its features, in order).
  // Sync mode: returns once the owner has applied the whole step (every rank's part), so
  // the next step's lookups see it; throws the owner's error if the update was rejected.
  virtual void Update(int32_t owner, int32_t rank, int64_t step, float lr,
                      std::vector<FeatureUpdate> part) = 0;
};

class LocalEmbeddingService : public EmbeddingService {
 public:
  // servers[i] is the store of server i (borrowed). world_size: trainers per step.
  LocalEmbeddingService(std::vector<EmbeddingShardStore*> servers, int32_t world_size,
                        std::chrono::milliseconds timeout);

  void Lookup(int32_t owner, int32_t shard, const std::vector<int64_t>& ids,
              std::vector<float>* rows) override;
  void Update(int32_t owner, int32_t rank, int64_t step, float lr,
              std::vector<FeatureUpdate> part) override;

 private:
  struct Pending {
    std::vector<std::vector<FeatureUpdate>> parts;  // by rank
    int32_t arrived = 0;
    bool applied = false;
    std::string error;  // non-empty: the update was rejected
  };
  EmbeddingShardStore& Store(int32_t owner) const;

  std::vector<EmbeddingShardStore*> servers_;
  const int32_t world_size_;
  const std::chrono::milliseconds timeout_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::pair<int32_t, int64_t>, Pending> pending_;  // (owner, step)
};

}  // namespace dlrm::dist

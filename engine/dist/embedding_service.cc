#include "engine/dist/embedding_service.h"

#include <utility>

#include "engine/core/status.h"

namespace dlrm::dist {

LocalEmbeddingService::LocalEmbeddingService(std::vector<EmbeddingShardStore*> servers,
                                             int32_t world_size,
                                             std::chrono::milliseconds timeout)
    : servers_(std::move(servers)), world_size_(world_size), timeout_(timeout) {
  if (world_size_ <= 0) ThrowInvalid("embedding service: world_size must be > 0");
}

EmbeddingShardStore& LocalEmbeddingService::Store(int32_t owner) const {
  if (owner < 0 || owner >= static_cast<int32_t>(servers_.size()) || !servers_[owner])
    ThrowInvalid("embedding service: no server ", owner, " (", servers_.size(), " servers)");
  return *servers_[owner];
}

void LocalEmbeddingService::Lookup(int32_t owner, int32_t shard, const std::vector<int64_t>& ids,
                                   std::vector<float>* rows) {
  EmbeddingShardStore& store = Store(owner);
  if (shard < 0 || shard >= static_cast<int32_t>(store.shards().size()))
    ThrowInvalid("embedding service: server ", owner, " has no shard ", shard);
  const int32_t width = store.shard_table(shard).dim();
  rows->resize(ids.size() * width);
  std::lock_guard<std::mutex> lock(mu_);  // not while an update runs
  store.Lookup(shard, ids.data(), static_cast<int64_t>(ids.size()), rows->data());
}

void LocalEmbeddingService::Update(int32_t owner, int32_t rank, int64_t step, float lr,
                                   std::vector<FeatureUpdate> part) {
  EmbeddingShardStore& store = Store(owner);
  if (rank < 0 || rank >= world_size_)
    ThrowInvalid("embedding service: rank ", rank, " outside [0, ", world_size_, ")");
  std::unique_lock<std::mutex> lock(mu_);
  const auto key = std::make_pair(owner, step);
  Pending& p = pending_[key];
  if (p.parts.empty()) p.parts.resize(world_size_);
  p.parts[rank] = std::move(part);
  if (++p.arrived == world_size_) {
    // The last part in applies the whole step, in rank order (= global sample order).
    try {
      const std::vector<FeatureUpdate> global = ConcatenateRanks(p.parts);
      const int64_t samples =
          global.empty() ? 0 : static_cast<int64_t>(global.front().lengths.size());
      if (!global.empty()) store.ApplyUpdate(global, samples, lr, step);
    } catch (const Error& e) {
      p.error = e.what();
    }
    p.applied = true;
    cv_.notify_all();
  } else if (!cv_.wait_for(lock, timeout_, [&] { return p.applied; })) {
    Throw(StatusCode::kTimeout, "embedding service: server ", owner, " step ", step,
          ": rank ", rank, " waited ", timeout_.count(), " ms for the other trainers' updates");
  }
  const std::string error = p.error;
  if (--p.arrived == 0) pending_.erase(key);  // the last rank out forgets the step
  if (!error.empty())
    Throw(StatusCode::kInvalidArgument, "server ", owner, " rejected step ", step, ": ", error);
}

}  // namespace dlrm::dist

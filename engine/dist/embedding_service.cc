#include "engine/dist/embedding_service.h"

#include <algorithm>
#include <utility>

#include "engine/core/status.h"

namespace dlrm::dist {

LocalEmbeddingService::LocalEmbeddingService(std::vector<EmbeddingShardStore*> servers,
                                             int32_t world_size, int64_t staleness,
                                             std::chrono::milliseconds timeout)
    : world_size_(world_size), staleness_(staleness), timeout_(timeout) {
  if (world_size_ <= 0) ThrowInvalid("embedding service: world_size must be > 0");
  if (staleness_ < 0) ThrowInvalid("embedding service: staleness must be >= 0, got ", staleness);
  for (EmbeddingShardStore* store : servers) {
    owners_.push_back(std::make_unique<Owner>());
    owners_.back()->store = store;
  }
  applier_ = std::thread([this] { ApplyLoop(); });
}

LocalEmbeddingService::~LocalEmbeddingService() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  applier_.join();
}

LocalEmbeddingService::Owner& LocalEmbeddingService::At(int32_t owner) {
  if (owner < 0 || owner >= static_cast<int32_t>(owners_.size()) || !owners_[owner]->store)
    ThrowInvalid("embedding service: no server ", owner, " (", owners_.size(), " servers)");
  return *owners_[owner];
}

void LocalEmbeddingService::Lookup(int32_t owner, int32_t shard, int64_t step,
                                   const std::vector<int64_t>& ids, std::vector<float>* rows) {
  Owner& o = At(owner);
  if (shard < 0 || shard >= static_cast<int32_t>(o.store->shards().size()))
    ThrowInvalid("embedding service: server ", owner, " has no shard ", shard);
  if (step < 1) ThrowInvalid("embedding service: lookup for step ", step, " (steps start at 1)");
  {
    std::unique_lock<std::mutex> lock(mu_);
    const int64_t needed = step - 1 - staleness_;
    if (!cv_.wait_for(lock, timeout_, [&] { return o.applied >= needed || !o.error.empty(); }))
      Throw(StatusCode::kTimeout, "embedding service: server ", owner, " has applied step ",
            o.applied, " but step ", step, "'s lookup needs step ", needed, " (staleness ",
            staleness_, "); waited ", timeout_.count(), " ms");
    if (!o.error.empty()) Throw(StatusCode::kFailedPrecondition, o.error);
    max_staleness_served_ = std::max(max_staleness_served_, step - 1 - o.applied);
  }
  const int32_t width = o.store->shard_table(shard).dim();
  rows->resize(ids.size() * width);
  std::shared_lock<std::shared_mutex> read(o.rows_mu);
  o.store->Lookup(shard, ids.data(), static_cast<int64_t>(ids.size()), rows->data());
}

void LocalEmbeddingService::Update(int32_t owner, int32_t rank, int64_t step, float lr,
                                   std::vector<FeatureUpdate> part) {
  Owner& o = At(owner);
  if (rank < 0 || rank >= world_size_)
    ThrowInvalid("embedding service: rank ", rank, " outside [0, ", world_size_, ")");
  std::lock_guard<std::mutex> lock(mu_);
  if (!o.error.empty()) Throw(StatusCode::kFailedPrecondition, o.error);
  if (step <= o.applied)
    ThrowInvalid("embedding service: server ", owner, " already applied step ", step);
  Pending& p = o.pending[step];
  if (p.parts.empty()) p.parts.resize(world_size_);
  p.parts[rank] = std::move(part);
  p.lr = lr;
  if (++p.arrived == world_size_) {
    ready_.emplace_back(owner, step);
    cv_.notify_all();
  }
}

void LocalEmbeddingService::ApplyLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    cv_.wait(lock, [&] { return stopping_ || !ready_.empty(); });
    if (stopping_) return;
    const auto [owner, step] = ready_.front();
    ready_.pop_front();
    Owner& o = *owners_[owner];
    Pending p = std::move(o.pending[step]);
    o.pending.erase(step);
    const std::chrono::milliseconds delay = apply_delay_;
    lock.unlock();
    std::string error;
    try {
      if (delay.count() > 0) std::this_thread::sleep_for(delay);
      // Rank order is the global sample order.
      const std::vector<FeatureUpdate> global = ConcatenateRanks(p.parts);
      const int64_t samples =
          global.empty() ? 0 : static_cast<int64_t>(global.front().lengths.size());
      std::unique_lock<std::shared_mutex> write(o.rows_mu);
      if (!global.empty()) o.store->ApplyUpdate(global, samples, p.lr, step);
    } catch (const Error& e) {
      error = "server " + std::to_string(owner) + " rejected step " + std::to_string(step) +
              "'s update: " + e.what();
    }
    lock.lock();
    if (error.empty()) {
      o.applied = step;
    } else {
      o.error = error;
    }
    cv_.notify_all();
  }
}

void LocalEmbeddingService::WaitUntilApplied(int64_t step) {
  std::unique_lock<std::mutex> lock(mu_);
  for (size_t i = 0; i < owners_.size(); ++i) {
    Owner& o = *owners_[i];
    // A server with nothing to serve gets no updates; it is trivially up to date.
    if (o.store->features().empty()) continue;
    if (!cv_.wait_for(lock, timeout_, [&] { return o.applied >= step || !o.error.empty(); }))
      Throw(StatusCode::kTimeout, "embedding service: server ", i, " has applied step ",
            o.applied, ", not ", step, ", after ", timeout_.count(), " ms");
    if (!o.error.empty()) Throw(StatusCode::kFailedPrecondition, o.error);
  }
}

int64_t LocalEmbeddingService::max_staleness_served() const {
  std::lock_guard<std::mutex> lock(mu_);
  return max_staleness_served_;
}

void LocalEmbeddingService::set_apply_delay(std::chrono::milliseconds delay) {
  std::lock_guard<std::mutex> lock(mu_);
  apply_delay_ = delay;
}

}  // namespace dlrm::dist

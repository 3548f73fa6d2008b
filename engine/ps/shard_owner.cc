#include "engine/ps/shard_owner.h"

#include <algorithm>
#include <utility>

#include "engine/core/status.h"

namespace dlrm::ps {

ShardOwner::ShardOwner(EmbeddingShardStore* store, int32_t owner, int32_t world_size,
                       int64_t staleness, int64_t applied_step)
    : store_(store),
      owner_(owner),
      world_size_(world_size),
      staleness_(staleness),
      applied_(applied_step) {
  if (store_ == nullptr) ThrowInvalid("server ", owner, ": no shard store");
  if (world_size_ <= 0) ThrowInvalid("server ", owner, ": world_size must be > 0");
  if (staleness_ < 0) ThrowInvalid("server ", owner, ": staleness must be >= 0, got ", staleness);
  if (applied_ < 0) ThrowInvalid("server ", owner, ": applied step must be >= 0");
  applier_ = std::thread([this] { ApplyLoop(); });
}

ShardOwner::~ShardOwner() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  applier_.join();
}

void ShardOwner::ThrowIfFailed() const {
  if (!error_.empty()) Throw(StatusCode::kFailedPrecondition, error_);
}

bool ShardOwner::UpToDate(int64_t step) const {
  // An owner with no features gets no updates: it is always up to date.
  return applied_ >= step || store_->features().empty();
}

bool ShardOwner::NextStepReady() const {
  const auto it = pending_.find(applied_ + 1);
  return it != pending_.end() && it->second.count == world_size_;
}

void ShardOwner::ValidateLookup(const std::vector<ShardRows>& request, int64_t step) const {
  if (step < 1) ThrowInvalid("server ", owner_, ": lookup for step ", step, " (steps start at 1)");
  const auto shards = static_cast<int32_t>(store_->shards().size());
  for (const ShardRows& r : request)
    if (r.shard < 0 || r.shard >= shards)
      ThrowInvalid("server ", owner_, " has no shard ", r.shard, " (it has ", shards, ")");
}

bool ShardOwner::Servable(int64_t step) const {
  std::lock_guard<std::mutex> lock(mu_);
  ThrowIfFailed();
  return UpToDate(step - 1 - staleness_);
}

void ShardOwner::WaitServable(int64_t step, std::chrono::milliseconds timeout) const {
  std::unique_lock<std::mutex> lock(mu_);
  const int64_t needed = step - 1 - staleness_;
  if (!cv_.wait_for(lock, timeout, [&] { return UpToDate(needed) || !error_.empty(); }))
    Throw(StatusCode::kTimeout, "server ", owner_, " has applied step ", applied_, " but step ",
          step, "'s lookup needs step ", needed, " (staleness ", staleness_, "); waited ",
          timeout.count(), " ms");
  ThrowIfFailed();
}

void ShardOwner::ReadRows(int64_t step, std::vector<ShardRows>* request) {
  ValidateLookup(*request, step);
  std::shared_lock<std::shared_mutex> read(rows_mu_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!store_->features().empty())
      max_staleness_served_ = std::max(max_staleness_served_, step - 1 - applied_);
  }
  // Read into fresh buffers: a bad id in the k-th shard leaves the request untouched.
  std::vector<std::vector<float>> rows(request->size());
  for (size_t i = 0; i < request->size(); ++i) {
    const ShardRows& r = (*request)[i];
    rows[i].resize(r.ids.size() * store_->shard_table(r.shard).dim());
    store_->Lookup(r.shard, r.ids.data(), static_cast<int64_t>(r.ids.size()), rows[i].data());
  }
  for (size_t i = 0; i < request->size(); ++i) (*request)[i].rows = std::move(rows[i]);
}

void ShardOwner::AddUpdate(int32_t rank, int64_t step, float lr, std::vector<FeatureUpdate> part) {
  if (rank < 0 || rank >= world_size_)
    ThrowInvalid("server ", owner_, ": update from rank ", rank, " outside [0, ", world_size_, ")");
  std::lock_guard<std::mutex> lock(mu_);
  ThrowIfFailed();
  if (step <= applied_)
    ThrowInvalid("server ", owner_, ": update for step ", step, ", but step ", applied_,
                 " is already applied");
  // A trainer's update for step s follows its lookup for s, which needed step s - 1 - k
  // applied: anything further ahead is not from a trainer keeping the rule.
  if (step > applied_ + 1 + staleness_)
    ThrowInvalid("server ", owner_, ": update for step ", step, " is more than staleness ",
                 staleness_, " + 1 steps ahead of the last applied step ", applied_);
  Pending& p = pending_[step];
  if (p.parts.empty()) {
    p.parts.resize(world_size_);
    p.arrived.resize(world_size_, false);
  }
  if (p.arrived[rank])
    ThrowInvalid("server ", owner_, ": rank ", rank, " sent step ", step, "'s update twice");
  if (p.count > 0 && p.lr != lr)
    ThrowInvalid("server ", owner_, ": rank ", rank, " sent learning rate ", lr, " for step ", step,
                 ", another rank sent ", p.lr);
  p.parts[rank] = std::move(part);
  p.arrived[rank] = true;
  p.lr = lr;
  if (++p.count == world_size_) cv_.notify_all();
}

void ShardOwner::ApplyLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    cv_.wait(lock, [&] { return stopping_ || (error_.empty() && NextStepReady()); });
    if (stopping_) return;
    const int64_t step = applied_ + 1;
    Pending p = std::move(pending_[step]);
    pending_.erase(step);
    const std::chrono::milliseconds delay = apply_delay_;
    lock.unlock();
    std::string error;
    try {
      if (delay.count() > 0) std::this_thread::sleep_for(delay);
      const std::vector<FeatureUpdate> global = ConcatenateRanks(p.parts);
      const int64_t samples =
          global.empty() ? 0 : static_cast<int64_t>(global.front().lengths.size());
      std::unique_lock<std::shared_mutex> write(rows_mu_);
      if (!global.empty()) store_->ApplyUpdate(global, samples, p.lr, step);
    } catch (const Error& e) {
      error = "server " + std::to_string(owner_) + " rejected step " + std::to_string(step) +
              "'s update: " + e.what();
    }
    lock.lock();
    if (error.empty()) {
      applied_ = step;
    } else {
      error_ = error;
    }
    cv_.notify_all();
    lock.unlock();
    NotifyApplied();
    lock.lock();
  }
}

void ShardOwner::WaitApplied(int64_t step, std::chrono::milliseconds timeout) const {
  std::unique_lock<std::mutex> lock(mu_);
  if (!cv_.wait_for(lock, timeout, [&] { return UpToDate(step) || !error_.empty(); }))
    Throw(StatusCode::kTimeout, "server ", owner_, " has applied step ", applied_, ", not ", step,
          ", after ", timeout.count(), " ms");
  ThrowIfFailed();
}

bool ShardOwner::Applied(int64_t step) const {
  std::lock_guard<std::mutex> lock(mu_);
  ThrowIfFailed();
  return UpToDate(step);
}

void ShardOwner::Frozen(const std::function<void(int64_t applied)>& fn) {
  // Applies hold rows_mu_ exclusively, so a shared hold keeps the rows still.
  std::shared_lock<std::shared_mutex> read(rows_mu_);
  fn(applied());
}

void ShardOwner::Fail(const std::string& reason) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (error_.empty()) error_ = "server " + std::to_string(owner_) + " stopped: " + reason;
  }
  cv_.notify_all();
  NotifyApplied();
}

void ShardOwner::set_on_applied(std::function<void()> callback) {
  std::lock_guard<std::mutex> lock(callback_mu_);
  on_applied_ = std::move(callback);
}

void ShardOwner::NotifyApplied() {
  std::lock_guard<std::mutex> lock(callback_mu_);
  if (on_applied_) on_applied_();
}

int64_t ShardOwner::applied() const {
  std::lock_guard<std::mutex> lock(mu_);
  return applied_;
}

int64_t ShardOwner::max_staleness_served() const {
  std::lock_guard<std::mutex> lock(mu_);
  return max_staleness_served_;
}

void ShardOwner::set_apply_delay(std::chrono::milliseconds delay) {
  std::lock_guard<std::mutex> lock(mu_);
  apply_delay_ = delay;
}

}  // namespace dlrm::ps

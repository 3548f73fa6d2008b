#include "engine/ps/service.h"

#include <algorithm>
#include <utility>

#include "engine/core/status.h"

namespace dlrm::ps {
namespace {

// In process there is nothing to overlap: the lookup runs when it is waited for.
class DeferredLookup : public PendingLookup {
 public:
  DeferredLookup(ShardOwner* owner, int64_t step, std::vector<ShardRows> request,
                 std::chrono::milliseconds timeout)
      : owner_(owner), step_(step), request_(std::move(request)), timeout_(timeout) {}

  std::vector<ShardRows> Wait() override {
    owner_->WaitServable(step_, timeout_);
    owner_->ReadRows(step_, &request_);
    return std::move(request_);
  }

 private:
  ShardOwner* owner_;
  int64_t step_;
  std::vector<ShardRows> request_;
  std::chrono::milliseconds timeout_;
};

}  // namespace

LocalEmbeddingService::LocalEmbeddingService(std::vector<EmbeddingShardStore*> servers,
                                             int32_t world_size, int64_t staleness,
                                             std::chrono::milliseconds timeout)
    : timeout_(timeout) {
  for (size_t i = 0; i < servers.size(); ++i)
    owners_.push_back(
        std::make_unique<ShardOwner>(servers[i], static_cast<int32_t>(i), world_size, staleness));
}

ShardOwner& LocalEmbeddingService::At(int32_t owner) {
  if (owner < 0 || owner >= static_cast<int32_t>(owners_.size()))
    ThrowInvalid("embedding service: no server ", owner, " (", owners_.size(), " servers)");
  return *owners_[owner];
}

std::unique_ptr<PendingLookup> LocalEmbeddingService::SubmitLookup(int32_t owner, int64_t step,
                                                                   std::vector<ShardRows> request) {
  ShardOwner& o = At(owner);
  o.ValidateLookup(request, step);
  return std::make_unique<DeferredLookup>(&o, step, std::move(request), timeout_);
}

void LocalEmbeddingService::Update(int32_t owner, int32_t rank, int64_t step, float lr,
                                   std::vector<FeatureUpdate> part) {
  At(owner).AddUpdate(rank, step, lr, std::move(part));
}

void LocalEmbeddingService::WaitUntilApplied(int64_t step) {
  for (const auto& owner : owners_) owner->WaitApplied(step, timeout_);
}

int64_t LocalEmbeddingService::max_staleness_served() const {
  int64_t most = 0;
  for (const auto& owner : owners_) most = std::max(most, owner->max_staleness_served());
  return most;
}

void LocalEmbeddingService::set_apply_delay(std::chrono::milliseconds delay) {
  for (const auto& owner : owners_) owner->set_apply_delay(delay);
}

}  // namespace dlrm::ps

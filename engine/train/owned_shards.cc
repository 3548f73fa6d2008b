#include "engine/train/owned_shards.h"

#include "engine/core/status.h"

namespace dlrm::train {
namespace {

class HostOwnedShards final : public OwnedShards {
 public:
  explicit HostOwnedShards(ps::EmbeddingShardStore* store) : store_(*store) {}

  std::string name() const override { return "cpu"; }
  void Pool(const ValidatedBatch& batch, float* out) override { store_.Pool(batch, out); }
  bool PooledUpdateIsFinite(const ValidatedBatch& batch, const float* d_pooled, float lr,
                            int64_t step) override {
    return store_.PooledUpdateIsFinite(batch, d_pooled, lr, step);
  }
  void ApplyPooledUpdate(const float* d_pooled, float lr, int64_t step) override {
    store_.ApplyPooledUpdate(d_pooled, lr, step);
  }
  void PullState() override {}
  void StoreChanged() override {}

 private:
  ps::EmbeddingShardStore& store_;
};

}  // namespace

std::unique_ptr<OwnedShards> MakeHostOwnedShards(ps::EmbeddingShardStore* store) {
  return std::make_unique<HostOwnedShards>(store);
}

std::unique_ptr<OwnedShards> MakeOwnedShards(const OwnedShardsFactory& factory,
                                             const config::DlrmConfig& config,
                                             ps::EmbeddingShardStore* store, ThreadPool* pool) {
  if (!factory) RequireHostDevice(config, "owned shards");
  return factory ? factory(config, store, pool) : MakeHostOwnedShards(store);
}

void RequireHostDevice(const config::DlrmConfig& config, const char* what) {
  if (config.device().kind() == config::DeviceConfig::CPU) return;
  Throw(StatusCode::kFailedPrecondition, "device.kind is ",
        config::DeviceConfig::Kind_Name(config.device().kind()),
        " but this trainer was made without device backends (a host of the train layer "
        "alone) for its ",
        what, ": give it engine/device_backends.h's factories, or use device.kind CPU");
}

}  // namespace dlrm::train

#include "engine/cuda/backend.h"

#include <cuda_runtime.h>

#include <mutex>
#include <string>
#include <vector>

#include "engine/core/status.h"
#include "engine/cuda/device.h"
#include "engine/cuda/device_buffer.h"
#include "engine/cuda/interaction.h"
#include "engine/cuda/linear.h"
#include "engine/cuda/pooled_embedding.h"

namespace dlrm::cuda {
namespace {

DeviceActivation ToDevice(Activation act) {
  return act == Activation::kRelu ? DeviceActivation::kRelu : DeviceActivation::kNone;
}

// The batch's arrays on the device.
struct DeviceBatch {
  DeviceBuffer<float> dense, weights;
  DeviceBuffer<int64_t> offsets, ids;
  DeviceBuffer<FeatureSpec> specs;  // the pooled forward's features
};

class CudaBackend final : public train::Backend {
 public:
  CudaBackend(int ordinal, train::ModelState* state)
      : s_(*state), ordinal_(ordinal), device_(OpenDevice(ordinal)) {
    CheckCuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    linear_ = std::make_unique<LinearContext>(stream_);
    PushState();
  }
  ~CudaBackend() override {
    linear_.reset();
    cudaStreamDestroy(stream_);
  }

  std::string name() const override { return "cuda:" + std::to_string(ordinal_); }

  double TrainStep(const ValidatedBatch&, const train::StepRates&) override {
    Throw(StatusCode::kFailedPrecondition, "training on ", name(), " (", device_.name,
          ") is not built yet in this libdlrm (prediction is); set device.kind to CPU to "
          "train, then load the checkpoint into a CUDA engine to predict");
  }

  void PredictLogits(const ValidatedBatch& batch, float* logits) const override {
    std::lock_guard<std::mutex> lock(mu_);
    CheckCuda(cudaSetDevice(ordinal_), "cudaSetDevice");
    const int64_t n = batch.view.batch_size;
    DeviceBatch b;
    Upload(batch, &b);
    DeviceBuffer<float> pooled(static_cast<size_t>(n) * s_.model.pooled_width());
    Pool(batch, b, pooled.get());
    std::vector<DeviceBuffer<float>> bottom_acts, top_acts;
    const float* x = MlpForward(s_.model.bottom_mlp(), b.dense.get(), n, &bottom_acts);
    const InteractionShape shape = Shape();
    DeviceBuffer<float> inter(static_cast<size_t>(n) * shape.out_dim());
    LaunchInteractionForward(shape, x, pooled.get(), n, inter.get(), stream_);
    const float* y = MlpForward(s_.model.top_mlp(), inter.get(), n, &top_acts);
    CheckCuda(cudaMemcpyAsync(logits, y, n * sizeof(float), cudaMemcpyDeviceToHost, stream_),
              "cudaMemcpyAsync (logits)");
    CheckCuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  }

  // Nothing on the device changes the parameters yet (no training), so the host copy is
  // always current.
  void PullState() const override {}

  void PushState() override {
    std::lock_guard<std::mutex> lock(mu_);
    CheckCuda(cudaSetDevice(ordinal_), "cudaSetDevice");
    params_.Upload(s_.model.dense_params(), stream_);
    tables_.resize(s_.model.tables().size());
    for (size_t t = 0; t < tables_.size(); ++t)
      tables_[t].Upload(s_.model.tables()[t].data(), stream_);
    CheckCuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  }

 private:
  void Upload(const ValidatedBatch& batch, DeviceBatch* b) const {
    const BatchView& v = batch.view;
    b->dense.Upload(v.dense, static_cast<size_t>(v.batch_size) * v.num_dense, stream_);
    b->offsets.Upload(batch.offsets, stream_);
    b->ids.Upload(v.ids, static_cast<size_t>(v.num_ids), stream_);
    if (v.weights != nullptr) b->weights.Upload(v.weights, static_cast<size_t>(v.num_ids), stream_);
  }

  void Pool(const ValidatedBatch& batch, DeviceBatch& b, float* pooled) const {
    const auto& bindings = s_.model.feature_bindings();
    if (bindings.empty()) return;
    std::vector<FeatureSpec> specs;
    for (const FeatureBinding& f : bindings)
      specs.push_back(
          {tables_[f.table].get(), s_.model.tables()[f.table].dim(), f.offset, f.mean ? 1 : 0});
    b.specs.Upload(specs, stream_);
    PooledForwardArgs args;
    args.features = b.specs.get();
    args.num_features = static_cast<int32_t>(specs.size());
    args.batch_size = batch.view.batch_size;
    args.offsets = b.offsets.get();
    args.ids = b.ids.get();
    args.weights = batch.view.weights != nullptr ? b.weights.get() : nullptr;
    args.out = pooled;
    args.out_width = s_.model.pooled_width();
    LaunchPooledForward(args, stream_);
  }

  // Every layer's output into acts (kept for a backward); returns the last.
  const float* MlpForward(const Mlp<float>& mlp, const float* x, int64_t n,
                          std::vector<DeviceBuffer<float>>* acts) const {
    const float* params = params_.get();
    for (int l = 0; l < mlp.num_layers(); ++l) {
      acts->emplace_back(static_cast<size_t>(n) * mlp.layer_out(l));
      linear_->Forward(x, n, mlp.layer_in(l), mlp.layer_out(l), params + mlp.weight_offset(l),
                       params + mlp.bias_offset(l), ToDevice(mlp.activation(l)),
                       acts->back().get());
      x = acts->back().get();
    }
    return x;
  }

  InteractionShape Shape() const {
    const Interaction<float>& i = s_.model.interaction();
    return {i.kind() == config::ModelConfig::DOT, i.bottom_dim(), i.num_features(),
            i.pooled_width()};
  }

  train::ModelState& s_;
  const int ordinal_;
  const DeviceInfo device_;
  cudaStream_t stream_ = nullptr;
  // One stream and one cuBLASLt context: calls are serialized.
  mutable std::mutex mu_;
  std::unique_ptr<LinearContext> linear_;
  DeviceBuffer<float> params_;
  std::vector<DeviceBuffer<float>> tables_;
};

}  // namespace

std::unique_ptr<train::Backend> MakeCudaBackend(int ordinal, train::ModelState* state,
                                                ThreadPool* pool) {
  (void)pool;  // the host's threads have nothing to do in a device step
  return std::make_unique<CudaBackend>(ordinal, state);
}

}  // namespace dlrm::cuda

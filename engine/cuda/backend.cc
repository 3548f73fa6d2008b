#include "engine/cuda/backend.h"

#include <cuda_runtime.h>

#include <mutex>
#include <string>
#include <vector>

#include "engine/core/status.h"
#include "engine/cuda/dense_optimizer.h"
#include "engine/cuda/device.h"
#include "engine/cuda/device_buffer.h"
#include "engine/cuda/embedding_backward.h"
#include "engine/cuda/finite.h"
#include "engine/cuda/interaction.h"
#include "engine/cuda/linear.h"
#include "engine/cuda/pooled_embedding.h"
#include "engine/train/step.h"

namespace dlrm::cuda {
namespace {

DeviceActivation ToDevice(Activation act) {
  return act == Activation::kRelu ? DeviceActivation::kRelu : DeviceActivation::kNone;
}

// A batch on the device, and every activation and gradient of one step; reused across
// steps (a buffer is reallocated only when its size changes).
struct StepBuffers {
  DeviceBuffer<float> dense, labels, weights;
  DeviceBuffer<int64_t> offsets, ids;
  DeviceBuffer<FeatureSpec> specs;
  DeviceBuffer<float> pooled, inter;
  std::vector<DeviceBuffer<float>> bottom_acts, top_acts;
  // Backward.
  DeviceBuffer<float> dlogits, d_inter, d_bottom, d_pooled, scratch_a, scratch_b;
  DeviceBuffer<double> losses, loss_sum;
  DeviceBuffer<int32_t> non_finite;
};

class CudaBackend final : public train::Backend {
 public:
  CudaBackend(int ordinal, train::ModelState* state, const config::DlrmConfig& config)
      : s_(*state), config_(config), ordinal_(ordinal), device_(OpenDevice(ordinal)) {
    CheckCuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    linear_ = std::make_unique<LinearContext>(stream_);
    PushState();
  }
  ~CudaBackend() override {
    linear_.reset();
    cudaStreamDestroy(stream_);
  }

  std::string name() const override { return "cuda:" + std::to_string(ordinal_); }

  double TrainStep(const ValidatedBatch& batch, const train::StepRates& rates) override {
    std::lock_guard<std::mutex> lock(mu_);
    CheckCuda(cudaSetDevice(ordinal_), "cudaSetDevice");
    const int64_t n = batch.view.batch_size;
    Upload(batch, true, buf_);
    const float* logits = Forward(batch, buf_);
    bool finite = false;
    const double loss = Backward(logits, n, &finite) / static_cast<double>(n);
    train::CheckFinite(rates.t - 1, loss, {}, finite);  // nothing is updated yet
    ApplyUpdates(batch, rates);
    host_stale_ = true;
    return loss;
  }

  void PredictLogits(const ValidatedBatch& batch, float* logits) const override {
    std::lock_guard<std::mutex> lock(mu_);
    CheckCuda(cudaSetDevice(ordinal_), "cudaSetDevice");
    StepBuffers b;  // a prediction may run beside training's buffers being reused
    Upload(batch, false, b);
    const float* y = Forward(batch, b);
    CheckCuda(cudaMemcpyAsync(logits, y, batch.view.batch_size * sizeof(float),
                              cudaMemcpyDeviceToHost, stream_),
              "cudaMemcpyAsync (logits)");
    CheckCuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  }

  void PullState() const override {
    std::lock_guard<std::mutex> lock(mu_);
    if (!host_stale_) return;
    CheckCuda(cudaSetDevice(ordinal_), "cudaSetDevice");
    ForEachState([&](DeviceBuffer<float>& device, std::vector<float>& host) {
      device.Download(host.data(), host.size(), stream_);
    });
    CheckCuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
    host_stale_ = false;
  }

  void PushState() override {
    std::lock_guard<std::mutex> lock(mu_);
    CheckCuda(cudaSetDevice(ordinal_), "cudaSetDevice");
    ForEachState([&](DeviceBuffer<float>& device, std::vector<float>& host) {
      device.Upload(host, stream_);
    });
    CheckCuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
    host_stale_ = false;
  }

 private:
  // fn(device copy, host vector) for every parameter and optimizer state, in a fixed order;
  // sizes the device copies on first use.
  template <typename Fn>
  void ForEachState(Fn fn) const {
    size_t k = 0;
    auto visit = [&](std::vector<float>& host) {
      if (state_.size() <= k) state_.emplace_back();
      fn(state_[k++], host);
    };
    visit(s_.model.dense_params());
    for (auto& [name, buffer] : s_.dense_optimizer->StateBuffers()) visit(*buffer);
    for (size_t t = 0; t < s_.model.tables().size(); ++t) {
      visit(s_.model.tables()[t].data());
      for (auto& [name, buffer] : s_.sparse_optimizer->StateBuffers(static_cast<int32_t>(t)))
        visit(*buffer);
    }
  }
  // The device copy of the dense parameters, of table t, and their optimizers' states:
  // the order of ForEachState.
  float* params() const { return state_[0].get(); }
  std::vector<float*> DenseStates() const {
    std::vector<float*> states;
    for (int i = 0; i < DenseOptimizerStateCount(config_.dense_optimizer()); ++i)
      states.push_back(state_[1 + i].get());
    return states;
  }
  size_t TableSlot(size_t t) const {
    size_t slot = 1 + DenseOptimizerStateCount(config_.dense_optimizer());
    for (size_t u = 0; u < t; ++u)
      slot += 1 + s_.sparse_optimizer->StateBuffers(static_cast<int32_t>(u)).size();
    return slot;
  }

  void Upload(const ValidatedBatch& batch, bool labels, StepBuffers& b) const;
  const float* Forward(const ValidatedBatch& batch, StepBuffers& b) const;
  const float* MlpForward(const Mlp<float>& mlp, const float* x, int64_t n,
                          std::vector<DeviceBuffer<float>>& acts) const;
  void MlpBackward(const Mlp<float>& mlp, const float* x,
                   const std::vector<DeviceBuffer<float>>& acts, float* dy, int64_t n, float* dx);
  double Backward(const float* logits, int64_t n, bool* finite);
  void ApplyUpdates(const ValidatedBatch& batch, const train::StepRates& rates);
  EmbeddingBackwardArgs SparseArgs(const ValidatedBatch& batch,
                                   DeviceBuffer<SparseFeatureArgs>& features,
                                   DeviceBuffer<SparseTableArgs>& tables);
  InteractionShape Shape() const {
    const Interaction<float>& i = s_.model.interaction();
    return {i.kind() == config::ModelConfig::DOT, i.bottom_dim(), i.num_features(),
            i.pooled_width()};
  }

  train::ModelState& s_;
  const config::DlrmConfig config_;
  const int ordinal_;
  const DeviceInfo device_;
  cudaStream_t stream_ = nullptr;
  // One stream and one cuBLASLt context: every call is serialized.
  mutable std::mutex mu_;
  std::unique_ptr<LinearContext> linear_;
  mutable std::vector<DeviceBuffer<float>> state_;  // ForEachState's order
  mutable bool host_stale_ = false;                 // the device trained since PullState
  StepBuffers buf_;
  DeviceBuffer<float> dense_grad_;
  DeviceBuffer<SparseFeatureArgs> sparse_features_;
  DeviceBuffer<SparseTableArgs> sparse_tables_;
  EmbeddingBackward embedding_backward_;
};

void CudaBackend::Upload(const ValidatedBatch& batch, bool labels, StepBuffers& b) const {
  const BatchView& v = batch.view;
  b.dense.Upload(v.dense, static_cast<size_t>(v.batch_size) * v.num_dense, stream_);
  if (labels) b.labels.Upload(v.labels, static_cast<size_t>(v.batch_size), stream_);
  b.offsets.Upload(batch.offsets, stream_);
  b.ids.Upload(v.ids, static_cast<size_t>(v.num_ids), stream_);
  if (v.weights != nullptr) b.weights.Upload(v.weights, static_cast<size_t>(v.num_ids), stream_);
}

const float* CudaBackend::Forward(const ValidatedBatch& batch, StepBuffers& b) const {
  const int64_t n = batch.view.batch_size;
  b.pooled.Resize(static_cast<size_t>(n) * s_.model.pooled_width());
  const auto& bindings = s_.model.feature_bindings();
  if (!bindings.empty()) {
    std::vector<FeatureSpec> specs;
    for (const FeatureBinding& f : bindings)
      specs.push_back({state_[TableSlot(f.table)].get(), s_.model.tables()[f.table].dim(), f.offset,
                       f.mean ? 1 : 0});
    b.specs.Upload(specs, stream_);
    PooledForwardArgs args;
    args.features = b.specs.get();
    args.num_features = static_cast<int32_t>(specs.size());
    args.batch_size = n;
    args.offsets = b.offsets.get();
    args.ids = b.ids.get();
    args.weights = batch.view.weights != nullptr ? b.weights.get() : nullptr;
    args.out = b.pooled.get();
    args.out_width = s_.model.pooled_width();
    LaunchPooledForward(args, stream_);
  }
  const float* x = MlpForward(s_.model.bottom_mlp(), b.dense.get(), n, b.bottom_acts);
  const InteractionShape shape = Shape();
  b.inter.Resize(static_cast<size_t>(n) * shape.out_dim());
  LaunchInteractionForward(shape, x, b.pooled.get(), n, b.inter.get(), stream_);
  return MlpForward(s_.model.top_mlp(), b.inter.get(), n, b.top_acts);
}

const float* CudaBackend::MlpForward(const Mlp<float>& mlp, const float* x, int64_t n,
                                     std::vector<DeviceBuffer<float>>& acts) const {
  acts.resize(mlp.num_layers());
  for (int l = 0; l < mlp.num_layers(); ++l) {
    acts[l].Resize(static_cast<size_t>(n) * mlp.layer_out(l));
    linear_->Forward(x, n, mlp.layer_in(l), mlp.layer_out(l), params() + mlp.weight_offset(l),
                     params() + mlp.bias_offset(l), ToDevice(mlp.activation(l)), acts[l].get());
    x = acts[l].get();
  }
  return x;
}

// dy: the gradient w.r.t. the MLP's output (overwritten); dx: w.r.t. its input, or null.
void CudaBackend::MlpBackward(const Mlp<float>& mlp, const float* x,
                              const std::vector<DeviceBuffer<float>>& acts, float* dy, int64_t n,
                              float* dx) {
  float* grad = dense_grad_.get();
  for (int l = mlp.num_layers() - 1; l >= 0; --l) {
    const float* in = l == 0 ? x : acts[l - 1].get();
    DeviceBuffer<float>& next = l % 2 == 0 ? buf_.scratch_a : buf_.scratch_b;
    if (l > 0) next.Resize(static_cast<size_t>(n) * mlp.layer_in(l));
    float* d_in = l == 0 ? dx : next.get();
    linear_->Backward(in, acts[l].get(), dy, n, mlp.layer_in(l), mlp.layer_out(l),
                      params() + mlp.weight_offset(l), ToDevice(mlp.activation(l)), d_in,
                      grad + mlp.weight_offset(l), grad + mlp.bias_offset(l));
    dy = d_in;
  }
}

// The loss's backward through the whole dense graph: the dense gradient and d_pooled on
// the device; returns the loss SUM, and *finite whether every gradient value is finite.
double CudaBackend::Backward(const float* logits, int64_t n, bool* finite) {
  StepBuffers& b = buf_;
  const InteractionShape shape = Shape();
  dense_grad_.Resize(s_.model.dense_params().size());
  b.dlogits.Resize(n);
  b.losses.Resize(n);
  b.loss_sum.Resize(1);
  LaunchBceWithLogits(logits, b.labels.get(), n, 1.0f / static_cast<float>(n), b.dlogits.get(),
                      b.losses.get(), b.loss_sum.get(), stream_);
  b.d_inter.Resize(static_cast<size_t>(n) * shape.out_dim());
  MlpBackward(s_.model.top_mlp(), b.inter.get(), b.top_acts, b.dlogits.get(), n, b.d_inter.get());
  b.d_bottom.Resize(static_cast<size_t>(n) * shape.bottom_dim);
  b.d_pooled.Resize(static_cast<size_t>(n) * shape.pooled_width);
  LaunchInteractionBackward(shape, b.bottom_acts.back().get(), b.pooled.get(), b.d_inter.get(), n,
                            b.d_bottom.get(), b.d_pooled.get(), stream_);
  MlpBackward(s_.model.bottom_mlp(), b.dense.get(), b.bottom_acts, b.d_bottom.get(), n, nullptr);
  b.non_finite.Resize(1);
  CheckCuda(cudaMemsetAsync(b.non_finite.get(), 0, sizeof(int32_t), stream_), "cudaMemsetAsync");
  LaunchCountNonFinite(dense_grad_.get(), static_cast<int64_t>(dense_grad_.size()),
                       b.non_finite.get(), stream_);
  LaunchCountNonFinite(b.d_pooled.get(), static_cast<int64_t>(b.d_pooled.size()),
                       b.non_finite.get(), stream_);
  double loss_sum = 0;
  int32_t non_finite = 0;
  b.loss_sum.Download(&loss_sum, 1, stream_);
  b.non_finite.Download(&non_finite, 1, stream_);
  CheckCuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  *finite = non_finite == 0;
  return loss_sum;
}

EmbeddingBackwardArgs CudaBackend::SparseArgs(const ValidatedBatch& batch,
                                              DeviceBuffer<SparseFeatureArgs>& features,
                                              DeviceBuffer<SparseTableArgs>& tables) {
  std::vector<SparseFeatureArgs> f;
  for (const FeatureBinding& b : s_.model.feature_bindings())
    f.push_back({b.table, b.offset, b.mean ? 1 : 0});
  std::vector<SparseTableArgs> t;
  int32_t max_dim = 1;
  for (size_t i = 0; i < s_.model.tables().size(); ++i) {
    const size_t slot = TableSlot(i);
    const size_t states = s_.sparse_optimizer->StateBuffers(static_cast<int32_t>(i)).size();
    const auto& table = s_.model.tables()[i];
    t.push_back({state_[slot].get(), table.num_rows(), table.dim(),
                 states > 0 ? state_[slot + 1].get() : nullptr,
                 states > 1 ? state_[slot + 2].get() : nullptr});
    max_dim = std::max(max_dim, table.dim());
  }
  features.Upload(f, stream_);
  tables.Upload(t, stream_);
  EmbeddingBackwardArgs a;
  a.features = features.get();
  a.num_features = static_cast<int32_t>(f.size());
  a.tables = tables.get();
  a.num_tables = static_cast<int32_t>(t.size());
  a.max_dim = max_dim;
  a.batch_size = batch.view.batch_size;
  a.offsets = buf_.offsets.get();
  a.ids = buf_.ids.get();
  a.weights = batch.view.weights != nullptr ? buf_.weights.get() : nullptr;
  a.num_ids = batch.view.num_ids;
  a.d_pooled = buf_.d_pooled.get();
  a.pooled_width = s_.model.pooled_width();
  return a;
}

void CudaBackend::ApplyUpdates(const ValidatedBatch& batch, const train::StepRates& rates) {
  LaunchDenseUpdate(config_.dense_optimizer(), params(), dense_grad_.get(), DenseStates(),
                    static_cast<int64_t>(dense_grad_.size()), rates.dense_lr, rates.t, stream_);
  if (!s_.model.tables().empty() && batch.view.num_ids > 0)
    embedding_backward_.Run(SparseArgs(batch, sparse_features_, sparse_tables_),
                            config_.sparse_optimizer(), rates.sparse_lr, rates.t, stream_);
  CheckCuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
}

}  // namespace

std::unique_ptr<train::Backend> MakeCudaBackend(int ordinal, train::ModelState* state,
                                                const config::DlrmConfig& config,
                                                ThreadPool* pool) {
  (void)pool;  // the host's threads have nothing to do in a device step
  return std::make_unique<CudaBackend>(ordinal, state, config);
}

}  // namespace dlrm::cuda

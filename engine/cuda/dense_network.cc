#include "engine/cuda/dense_network.h"

#include "engine/core/status.h"
#include "engine/cuda/device.h"

namespace dlrm::cuda {
namespace {

DeviceActivation ToDevice(Activation act) {
  return act == Activation::kRelu ? DeviceActivation::kRelu : DeviceActivation::kNone;
}

// rows x width floats between buffers whose rows are `from` and `to` floats apart.
void CopyRows(const float* src, int from, float* dst, int to, int rows, int width,
              cudaStream_t stream) {
  CheckCuda(cudaMemcpy2DAsync(dst, static_cast<size_t>(to) * sizeof(float), src,
                              static_cast<size_t>(from) * sizeof(float),
                              static_cast<size_t>(width) * sizeof(float), static_cast<size_t>(rows),
                              cudaMemcpyDeviceToDevice, stream),
            "cudaMemcpy2DAsync (padded top layer)");
}

}  // namespace

MatmulPrecision PrecisionOf(const config::DeviceConfig& device) {
  switch (device.matmul_precision()) {
    case config::DeviceConfig::HIGH: return MatmulPrecision::kHigh;
    case config::DeviceConfig::MEDIUM: return MatmulPrecision::kMedium;
    default: return MatmulPrecision::kHighest;
  }
}

DenseNetwork::DenseNetwork(const DlrmModel<float>& model, cudaStream_t stream,
                           MatmulPrecision precision)
    : model_(model), stream_(stream), linear_(stream, precision) {
  if (model.cross_net() != nullptr) cross_ = std::make_unique<DeviceCrossNet>(*model.cross_net());
  const int width = model.top_mlp().layer_in(0);
  top_pad_.width = width;
  top_pad_.stride = cross_ ? width : (width + 3) / 4 * 4;
  if (!top_pad_.padded()) return;
  const size_t count = static_cast<size_t>(model.top_mlp().layer_out(0)) * top_pad_.stride;
  top_pad_.weight_grad.Resize(count);
  top_pad_.weights.Resize(count);  // its columns past width stay zero: copies skip them
  CheckCuda(cudaMemsetAsync(top_pad_.weights.get(), 0, count * sizeof(float), stream_),
            "cudaMemsetAsync (padded top layer)");
}

InteractionShape DenseNetwork::Shape() const {
  const Interaction<float>& i = model_.interaction();
  return {i.kind() == config::ModelConfig::DOT,
          i.bottom_dim(),
          i.num_features(),
          i.pooled_width(),
          i.self_interaction(),
          top_pad_.stride};
}

void DenseNetwork::Pool(const FeatureSpec* features, const DeviceBatch& in, DenseActivations& a) {
  const int64_t n = in.shape.batch_size;
  if (features == nullptr) {  // pooled by the caller
    DLRM_INTERNAL_CHECK(a.pooled.size() == static_cast<size_t>(n) * model_.pooled_width());
    return;
  }
  a.pooled.Resize(static_cast<size_t>(n) * model_.pooled_width());
  if (model_.feature_bindings().empty()) return;
  const auto count = static_cast<int32_t>(model_.feature_bindings().size());
  LaunchPooledForward(in.PooledArgs(features, count, a.pooled.get(), model_.pooled_width()),
                      stream_);
}

const float* DenseNetwork::Forward(const float* params, const FeatureSpec* features,
                                   const DeviceBatch& in, DenseActivations& a) {
  const int64_t n = in.shape.batch_size;
  Pool(features, in, a);
  const float* x = MlpForward(model_.bottom_mlp(), params, in.dense.get(), n, a.bottom);
  const InteractionShape shape = Shape();
  a.inter.Resize(static_cast<size_t>(n) * shape.row_stride());
  LaunchInteractionForward(shape, x, a.pooled.get(), n, a.inter.get(), stream_);
  a.top_in = TopInput(params, a, n);
  if (top_pad_.padded()) RefreshPaddedWeights(params);
  return MlpForward(model_.top_mlp(), params, a.top_in, n, a.top, top_pad_.padded());
}

void DenseNetwork::RefreshPaddedWeights(const float* params) {
  const Mlp<float>& top = model_.top_mlp();
  CopyRows(params + top.weight_offset(0), top_pad_.width, top_pad_.weights.get(), top_pad_.stride,
           top.layer_out(0), top_pad_.width, stream_);
}

const float* DenseNetwork::TopInput(const float* params, DenseActivations& a, int64_t n) {
  if (!cross_) return a.inter.get();
  return cross_->Forward(linear_, params, a.inter.get(), n, a.cross);
}

const float* DenseNetwork::MlpForward(const Mlp<float>& mlp, const float* params, const float* x,
                                      int64_t n, std::vector<DeviceBuffer<float>>& acts,
                                      bool padded) {
  acts.resize(mlp.num_layers());
  for (int l = 0; l < mlp.num_layers(); ++l) {
    const bool pad = padded && l == 0;
    acts[l].Resize(static_cast<size_t>(n) * mlp.layer_out(l));
    linear_.Forward(x, n, pad ? top_pad_.stride : mlp.layer_in(l), mlp.layer_out(l),
                    pad ? top_pad_.weights.get() : params + mlp.weight_offset(l),
                    params + mlp.bias_offset(l), ToDevice(mlp.activation(l)), acts[l].get());
    x = acts[l].get();
  }
  return x;
}

void DenseNetwork::MlpBackward(const Mlp<float>& mlp, const float* params, const float* x,
                               const std::vector<DeviceBuffer<float>>& acts, float* dy, int64_t n,
                               float* dx, DenseGradients& g, float* dense_grad, bool padded) {
  for (int l = mlp.num_layers() - 1; l >= 0; --l) {
    const bool pad = padded && l == 0;
    const float* in = l == 0 ? x : acts[l - 1].get();
    DeviceBuffer<float>& next = l % 2 == 0 ? g.scratch_a : g.scratch_b;
    // Grown only: both MLPs share the scratch, so a step allocates nothing once warm.
    if (l > 0) next.Reserve(static_cast<size_t>(n) * mlp.layer_in(l));
    float* d_in = l == 0 ? dx : next.get();
    float* dW = pad ? top_pad_.weight_grad.get() : dense_grad + mlp.weight_offset(l);
    linear_.Backward(in, acts[l].get(), dy, n, pad ? top_pad_.stride : mlp.layer_in(l),
                     mlp.layer_out(l), pad ? top_pad_.weights.get() : params + mlp.weight_offset(l),
                     ToDevice(mlp.activation(l)), d_in, dW, dense_grad + mlp.bias_offset(l));
    if (pad)  // the padded gradient's columns past width are the zero inputs': left out
      CopyRows(dW, top_pad_.stride, dense_grad + mlp.weight_offset(l), top_pad_.width,
               mlp.layer_out(l), top_pad_.width, stream_);
    dy = d_in;
  }
}

void DenseNetwork::Backward(const float* params, const DeviceBatch& in, float grad_scale,
                            const DenseActivations& a, DenseGradients& g, float* dense_grad) {
  const int64_t n = in.shape.batch_size;
  const InteractionShape shape = Shape();
  g.dlogits.Resize(n);
  g.losses.Resize(n);
  g.loss_sum.Resize(1);
  LaunchBceWithLogits(a.top.back().get(), in.labels.get(), n, grad_scale, g.dlogits.get(),
                      g.losses.get(), g.loss_sum.get(), stream_);
  g.d_inter.Resize(static_cast<size_t>(n) * shape.row_stride());
  if (cross_) g.d_cross.Resize(static_cast<size_t>(n) * shape.out_dim());
  MlpBackward(model_.top_mlp(), params, a.top_in, a.top, g.dlogits.get(), n,
              cross_ ? g.d_cross.get() : g.d_inter.get(), g, dense_grad, top_pad_.padded());
  if (cross_)
    cross_->Backward(linear_, params, a.inter.get(), a.cross, g.d_cross.get(), n, dense_grad,
                     g.d_inter.get());
  g.d_bottom.Resize(static_cast<size_t>(n) * shape.bottom_dim);
  g.d_pooled.Resize(static_cast<size_t>(n) * shape.pooled_width);
  LaunchInteractionBackward(shape, a.bottom.back().get(), a.pooled.get(), g.d_inter.get(), n,
                            g.d_bottom.get(), g.d_pooled.get(), stream_);
  MlpBackward(model_.bottom_mlp(), params, in.dense.get(), a.bottom, g.d_bottom.get(), n, nullptr,
              g, dense_grad);
}

}  // namespace dlrm::cuda

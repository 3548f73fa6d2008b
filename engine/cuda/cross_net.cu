#include <utility>

#include "engine/cuda/cross_net.h"
#include "engine/cuda/device.h"

namespace dlrm::cuda {
namespace {

constexpr int kThreads = 256;

unsigned Blocks(int64_t count) { return GridBlocks(count, kThreads); }

// out[i] = x0[i] * y[i] + x[i]: a layer's output.
__global__ void CrossMix(const float* x0, const float* y, const float* x, int64_t count,
                         float* out) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < count) out[i] = __fadd_rn(__fmul_rn(x0[i], y[i]), x[i]);
}

// dy[i] = g[i] * x0[i]; dx0[i] += g[i] * y[i]: the element-wise product's backward.
__global__ void CrossMixBackward(const float* g, const float* x0, const float* y, int64_t count,
                                 float* dy, float* dx0) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= count) return;
  dy[i] = __fmul_rn(g[i], x0[i]);
  dx0[i] = __fadd_rn(dx0[i], __fmul_rn(g[i], y[i]));
}

// out[i] = a[i] + b[i].
__global__ void Add(const float* a, const float* b, int64_t count, float* out) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < count) out[i] = __fadd_rn(a[i], b[i]);
}

}  // namespace

const float* DeviceCrossNet::Forward(LinearContext& linear, const float* params, const float* x0,
                                     int64_t n, CrossActivations& acts) const {
  const int d = net_.dim(), r = net_.rank(), layers = net_.num_layers();
  const auto values = static_cast<size_t>(n) * static_cast<size_t>(d);
  acts.h.resize(r == 0 ? 0 : layers);
  acts.y.resize(layers);
  acts.x.resize(layers);
  const float* x = x0;
  for (int l = 0; l < layers; ++l) {
    acts.y[l].Resize(values);
    acts.x[l].Resize(values);
    if (r == 0) {
      linear.Forward(x, n, d, d, params + net_.w_offset(l), params + net_.bias_offset(l),
                     DeviceActivation::kNone, acts.y[l].get());
    } else {
      acts.h[l].Resize(static_cast<size_t>(n) * static_cast<size_t>(r));
      linear.Forward(x, n, d, r, params + net_.v_offset(l), nullptr, DeviceActivation::kNone,
                     acts.h[l].get());
      linear.Forward(acts.h[l].get(), n, r, d, params + net_.u_offset(l),
                     params + net_.bias_offset(l), DeviceActivation::kNone, acts.y[l].get());
    }
    CrossMix<<<Blocks(values), kThreads, 0, linear.stream()>>>(
        x0, acts.y[l].get(), x, static_cast<int64_t>(values), acts.x[l].get());
    CheckCuda(cudaGetLastError(), "CrossMix");
    x = acts.x[l].get();
  }
  return x;
}

void DeviceCrossNet::LayerBackward(LinearContext& linear, const float* params, int l,
                                   const float* x, const CrossActivations& acts, float* dy,
                                   const float* g, int64_t n, float* grads, float* next) {
  const int d = net_.dim(), r = net_.rank();
  float* dx = dx_.get();
  if (r == 0) {
    linear.Backward(x, acts.y[l].get(), dy, n, d, d, params + net_.w_offset(l),
                    DeviceActivation::kNone, dx, grads + net_.w_offset(l),
                    grads + net_.bias_offset(l));
  } else {
    float* dh = dh_.get();
    linear.Backward(acts.h[l].get(), acts.y[l].get(), dy, n, r, d, params + net_.u_offset(l),
                    DeviceActivation::kNone, dh, grads + net_.u_offset(l),
                    grads + net_.bias_offset(l));
    linear.Backward(x, acts.h[l].get(), dh, n, d, r, params + net_.v_offset(l),
                    DeviceActivation::kNone, dx, grads + net_.v_offset(l), nullptr);
  }
  const int64_t values = n * d;
  Add<<<Blocks(values), kThreads, 0, linear.stream()>>>(g, dx, values, next);  // + identity
  CheckCuda(cudaGetLastError(), "cross network Add");
}

void DeviceCrossNet::Backward(LinearContext& linear, const float* params, const float* x0,
                              const CrossActivations& acts, const float* dout, int64_t n,
                              float* grads, float* dx0) {
  const int d = net_.dim(), r = net_.rank();
  const auto values = static_cast<size_t>(n) * static_cast<size_t>(d);
  for (DeviceBuffer<float>* b : {&g_, &next_, &dy_, &dx_}) b->Reserve(values);
  if (r > 0) dh_.Reserve(static_cast<size_t>(n) * static_cast<size_t>(r));
  cudaStream_t stream = linear.stream();
  CheckCuda(
      cudaMemcpyAsync(g_.get(), dout, values * sizeof(float), cudaMemcpyDeviceToDevice, stream),
      "cudaMemcpyAsync (cross network gradient)");
  CheckCuda(cudaMemsetAsync(dx0, 0, values * sizeof(float), stream), "cudaMemsetAsync");
  float *g = g_.get(), *next = next_.get();
  for (int l = net_.num_layers() - 1; l >= 0; --l) {
    const float* x = l == 0 ? x0 : acts.x[l - 1].get();
    CrossMixBackward<<<Blocks(values), kThreads, 0, stream>>>(
        g, x0, acts.y[l].get(), static_cast<int64_t>(values), dy_.get(), dx0);
    CheckCuda(cudaGetLastError(), "CrossMixBackward");
    LayerBackward(linear, params, l, x, acts, dy_.get(), g, n, grads, next);
    std::swap(g, next);
  }
  Add<<<Blocks(values), kThreads, 0, stream>>>(dx0, g, static_cast<int64_t>(values), dx0);
  CheckCuda(cudaGetLastError(), "cross network Add");  // x0 is also the first layer's x
}

}  // namespace dlrm::cuda

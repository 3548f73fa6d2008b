// DCNv2's cross network on a CUDA device: the CPU's definition and parameter layout
// (engine/dense/cross_net.h; x_{l+1} = x0 * (U_l (V_l x_l) + b_l) + x_l, or W_l at full
// rank), its GEMMs on the step's LinearContext (so at device.matmul_precision, cuBLASLt's
// deterministic algorithms) and its element-wise parts as kernels with one thread per
// value, products and sums rounded separately as the CPU's loop does. The bias gradient is
// LinearContext's fixed-order column sum. Results repeat bitwise run to run and agree with
// the CPU within fp32 rounding (the GEMMs' summation order is cuBLASLt's).
//
// Memory: parameters, gradients, activations and scratch are device memory; activations
// and scratch are grown only, so steps of one batch shape allocate nothing once warm (what
// a CUDA graph needs). Thread safety: used by one thread (the backend's stream) at a time.
// Errors: kInvalidArgument for bad sizes (LinearContext's), kInternal for CUDA failures.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "engine/cuda/device_buffer.h"
#include "engine/cuda/linear.h"
#include "engine/dense/cross_net.h"

namespace dlrm::cuda {

// Forward's outputs per layer l: h_l [n x rank] (low rank only), y_l [n x dim] and
// x_{l+1} [n x dim].
struct CrossActivations {
  std::vector<DeviceBuffer<float>> h, y, x;
};

class DeviceCrossNet {
 public:
  // net: the model's cross network (its shape and parameter offsets), borrowed.
  explicit DeviceCrossNet(const CrossNet<float>& net) : net_(net) {}

  // x0 [n x dim] -> x_L [n x dim] (inside acts).
  const float* Forward(LinearContext& linear, const float* params, const float* x0, int64_t n,
                       CrossActivations& acts) const;
  // dout [n x dim]: the loss gradient w.r.t. x_L. Overwrites the network's range of grads
  // (the model's absolute offsets) and dx0 [n x dim].
  void Backward(LinearContext& linear, const float* params, const float* x0,
                const CrossActivations& acts, const float* dout, int64_t n, float* grads,
                float* dx0);

 private:
  // Layer l's weight gradients and next = g + (the gradient w.r.t. its input x).
  void LayerBackward(LinearContext& linear, const float* params, int l, const float* x,
                     const CrossActivations& acts, float* dy, const float* g, int64_t n,
                     float* grads, float* next);

  const CrossNet<float>& net_;
  DeviceBuffer<float> g_, next_, dy_, dh_, dx_;  // Backward's scratch, grown only
};

}  // namespace dlrm::cuda

// DCNv2's cross network (Wang et al., "DCN V2", WWW'21; the MLPerf DLRM-DCNv2 model): L
// layers over the interaction's output x0 [n x d],
//   x_{l+1} = x0 * (W_l x_l + b_l) + x_l          (full rank, W_l [d x d]), or
//   x_{l+1} = x0 * (U_l (V_l x_l) + b_l) + x_l    (low rank r: V_l [r x d], U_l [d x r]),
// with * element-wise; the output x_L has the input's width.
//
// Parameters live in the model's flat vector from param_offset, per layer: V, U, b (low
// rank) or W, b (full rank), each row-major. Stateless over borrowed memory, as Mlp: the
// caller owns parameters, activations, gradients and scratch; every GEMM runs on the
// calling thread, so a chunk's result does not depend on which thread computes it.
// Errors: kInvalidArgument naming the argument for a dim, layer count or rank out of range.
#pragma once

#include <cstddef>
#include <cstdint>

#include "engine/dense/gemm.h"

namespace dlrm {

template <typename T>
class CrossNet {
 public:
  static constexpr int kMaxLayers = 64;

  // dim in [1, 2^20], num_layers in [1, kMaxLayers], rank 0 (full rank) or in [1, dim].
  // precision: what its GEMMs multiply (kBf16: the caller checked CpuHasAvx512Bf16()).
  CrossNet(int dim, int num_layers, int rank, size_t param_offset,
           GemmPrecision precision = GemmPrecision::kFp32);

  int dim() const { return dim_; }
  int num_layers() const { return layers_; }
  int rank() const { return rank_; }  // 0: full rank
  size_t num_params() const { return static_cast<size_t>(layers_) * LayerParams(); }
  size_t param_offset() const { return param_offset_; }
  // Absolute offsets, in the model's parameter vector, of layer l's tensors: V [r x d] and
  // U [d x r] (low rank), W [d x d] (full rank: the same offset as V), b [d].
  size_t v_offset(int l) const { return param_offset_ + static_cast<size_t>(l) * LayerParams(); }
  size_t u_offset(int l) const { return v_offset(l) + static_cast<size_t>(rank_) * dim_; }
  size_t w_offset(int l) const { return v_offset(l); }
  size_t bias_offset(int l) const { return v_offset(l) + LayerParams() - dim_; }

  // Values per row of Forward's activations and Backward's scratch.
  size_t activations_per_row() const { return static_cast<size_t>(layers_) * (rank_ + 2 * dim_); }
  size_t scratch_per_row() const { return static_cast<size_t>(2 * dim_ + rank_); }

  // Weights ~ N(0, sqrt(2 / (fan_in + fan_out))) (Xavier normal, as TorchRec's cross
  // layers), biases 0; tensor k draws from stream kStreamDenseBase + stream_base + k.
  void Initialize(T* params, uint64_t seed, uint64_t stream_base) const;

  // x0 [n x d] -> each layer's activations into acts; returns x_L [n x d] (inside acts).
  // weights: where the layers' weights stay packed for the step's other chunks, or null.
  const T* Forward(const T* params, const T* x0, int64_t n, T* acts,
                   GemmPackCache* weights = nullptr) const;
  // Where Forward left x_L in acts, for n rows.
  const T* Output(const T* acts, int64_t n) const {
    return acts + LayerOffset(layers_ - 1, n) + static_cast<size_t>(n) * (rank_ + dim_);
  }

  // dout [n x d] is the loss gradient w.r.t. x_L. Overwrites this network's range of
  // `grads` (absolute offsets) with the chunk's gradient and writes dx0 [n x d].
  void Backward(const T* params, const T* x0, const T* acts, const T* dout, int64_t n, T* grads,
                T* dx0, T* scratch, GemmPackCache* weights = nullptr) const;

 private:
  size_t LayerParams() const {
    const size_t d = static_cast<size_t>(dim_);
    return (rank_ == 0 ? d * d : 2 * d * static_cast<size_t>(rank_)) + d;
  }
  // Where layer l's activations start in a chunk of n rows: h [n x r], y [n x d],
  // x_{l+1} [n x d].
  size_t LayerOffset(int l, int64_t n) const {
    return static_cast<size_t>(l) * static_cast<size_t>(n) * (rank_ + 2 * dim_);
  }
  // The forward's element-wise part, one sweep: y += b, then next = x0 * y + x.
  void CrossSweep(const T* b, const T* x0, const T* x, int64_t n, T* y, T* next) const;
  // dy = g * x0; dx0 += g * y; db = column sums of dy (rows in order). kFirst: the first
  // layer the backward visits (the last one), where dx0 = 0 + g * y.
  template <bool kFirst>
  void ElementwiseBackward(const T* g, const T* x0, const T* y, int64_t n, T* dy, T* dx0,
                           T* db) const;
  // The layer's weight gradients from dy and its input x, and g += dy (W or U V): the
  // gradient w.r.t. x_{l+1} becomes the one w.r.t. x_l in place.
  void WeightsBackward(const T* params, int l, const T* x, const T* h, const T* dy, int64_t n,
                       T* grads, T* dh, T* g, GemmPackCache* weights) const;

  int dim_, layers_, rank_;
  size_t param_offset_;
  GemmPrecision precision_;
};

}  // namespace dlrm

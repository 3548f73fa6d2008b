// A stack of Linear layers with ReLU, laid out inside the model's flat parameter vector.
//
// Parameters live in one contiguous array owned by the model (so gradients, optimizer
// state and fixed-order reductions are flat arrays too); an Mlp only knows its offsets.
// Layer l occupies weight [out_l x in_l] then bias [out_l], layers in order.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/dense/linear.h"

namespace dlrm {

template <typename T>
class Mlp {
 public:
  // relu_last: whether the last layer is followed by ReLU (false for the top MLP's logit).
  // param_offset: where this MLP's first weight starts in the model's parameter vector.
  // precision: what its GEMMs multiply (kBf16: the caller checked CpuHasAvx512Bf16()).
  Mlp(int in_dim, std::vector<int> layer_sizes, bool relu_last, size_t param_offset,
      GemmPrecision precision = GemmPrecision::kFp32);

  int in_dim() const { return in_dim_; }
  int out_dim() const;
  int num_layers() const { return static_cast<int>(sizes_.size()); }
  int layer_in(int l) const;
  int layer_out(int l) const { return sizes_[l]; }
  size_t num_params() const;
  size_t param_offset() const { return param_offset_; }
  size_t weight_offset(int l) const;  // absolute, in the model's parameter vector
  size_t bias_offset(int l) const;
  // ReLU after every layer but the last, and after the last too when relu_last.
  Activation activation(int l) const;

  // Values per row the caller must provide for Forward's activations (sum of widths).
  size_t activations_per_row() const;
  // Values per row the caller must provide as Backward's scratch.
  size_t scratch_per_row() const;

  // DLRM reference initialization from the counter-based RNG: W ~ N(0, sqrt(2/(in+out))),
  // b ~ N(0, sqrt(1/out)); tensor k of this MLP draws from stream
  // kStreamDenseBase + stream_base + k.
  void Initialize(T* params, uint64_t seed, uint64_t stream_base) const;

  // x [n x in] -> every layer's post-activation output into acts [n x activations_per_row],
  // layer by layer (layer l's block is [n x out_l]). Returns the last layer's block.
  // weights: where the layers' weights stay packed for the step's other chunks, or null.
  const T* Forward(const T* params, const T* x, int64_t n, T* acts,
                   GemmPackCache* weights = nullptr) const;

  // dy [n x out_dim] is the loss gradient w.r.t. the last output (post-activation).
  // Overwrites this MLP's range of `grads` (absolute offsets) with the chunk's gradient
  // and writes dx [n x in] unless dx is null.
  void Backward(const T* params, const T* x, const T* acts, const T* dy, int64_t n, T* grads, T* dx,
                T* scratch, GemmPackCache* weights = nullptr) const;

 private:
  int in_dim_;
  std::vector<int> sizes_;
  bool relu_last_;
  size_t param_offset_;
  GemmPrecision precision_;
};

}  // namespace dlrm

// Feature interaction between the bottom MLP output x [n x d] and the F pooled embeddings.
//
// pooled is [n x pooled_width]: sample b's feature f occupies columns
// [feature_offset(f), feature_offset(f) + feature_dims[f]).
//  DOT: all dims equal d; out = [x, <z_i, z_j> for i in 1..F for j in 0..i-1] with
//       z_0 = x, z_i = e_i (strict lower triangle, row by row, as the DLRM reference);
//       out_dim = d + F(F+1)/2. With self_interaction the pairs are i in 0..F, j in 0..i
//       (the diagonal too, the reference's --arch-interaction-itself): d + (F+1)(F+2)/2.
//  CAT: out = [x, e_1, ..., e_F]; out_dim = d + pooled_width.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/config/dlrm.pb.h"

namespace dlrm {

template <typename T>
class Interaction {
 public:
  // Throws dlrm::Error (kInvalidArgument) if DOT is asked for with unequal dims, or
  // self_interaction with CAT.
  Interaction(config::ModelConfig::Interaction kind, int bottom_dim, std::vector<int> feature_dims,
              bool self_interaction = false);

  config::ModelConfig::Interaction kind() const { return kind_; }
  bool self_interaction() const { return self_; }
  int bottom_dim() const { return bottom_dim_; }
  int num_features() const { return static_cast<int>(dims_.size()); }
  int out_dim() const { return out_dim_; }
  int pooled_width() const { return pooled_width_; }
  int feature_offset(int f) const { return offsets_[f]; }

  void Forward(const T* x, const T* pooled, int64_t n, T* out) const;
  // dx [n x d] and dpooled [n x pooled_width] are overwritten.
  void Backward(const T* x, const T* pooled, const T* dout, int64_t n, T* dx, T* dpooled) const;

 private:
  config::ModelConfig::Interaction kind_;
  bool self_;  // DOT pairs include (i, i)
  int bottom_dim_;
  std::vector<int> dims_;
  std::vector<int> offsets_;
  int pooled_width_ = 0;
  int out_dim_ = 0;
  bool use_avx2_ = false;  // float DOT with dims a multiple of 8 on an AVX2 + FMA CPU
};

}  // namespace dlrm

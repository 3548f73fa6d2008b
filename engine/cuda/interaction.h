// The feature interaction and the loss on a CUDA device, the CPU's definitions
// (engine/dense/interaction.h, engine/dense/loss.h): DOT (z_0 = x, z_i = the i-th pooled
// embedding, out = [x, <z_i, z_j> for i in 1..F, j < i], or with self_interaction for i in
// 0..F, j <= i) and CAT (out = [x, pooled]), and BCE on logits summed in double.
//
// Determinism: every value is computed by one thread in a fixed order (a dot product over
// k ascending; a gradient over the pairs in the forward's order; the loss sum as a fixed
// tree over the samples), so results repeat bitwise; they agree with the CPU within
// rounding (the CPU's AVX2 DOT and its loss order differ).
//
// Memory: every pointer is device memory borrowed for the launch, rows row-major:
// x [n x d], pooled [n x pooled_width], out and dout [n x row_stride()] (out_dim values,
// then zeros in out's padding; dout's padding is not read).
// Thread safety: ordered by `stream`. Errors: kInvalidArgument for bad shapes.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace dlrm::cuda {

struct InteractionShape {
  bool dot = true;  // DOT, else CAT
  int bottom_dim = 0;
  int num_features = 0;
  int pooled_width = 0;           // DOT: num_features * bottom_dim
  bool self_interaction = false;  // DOT's pairs include (i, i): the CPU's self_interaction
  int stride = 0;                 // out's and dout's row stride, >= out_dim (0: out_dim)
  int row_stride() const { return stride > 0 ? stride : out_dim(); }
  int out_dim() const {
    const int f = num_features;
    if (!dot) return bottom_dim + pooled_width;
    return bottom_dim + (self_interaction ? (f + 1) * (f + 2) / 2 : f * (f + 1) / 2);
  }
};

void LaunchInteractionForward(const InteractionShape& s, const float* x, const float* pooled,
                              int64_t n, float* out, cudaStream_t stream);
// dx [n x d] and dpooled [n x pooled_width] are overwritten.
void LaunchInteractionBackward(const InteractionShape& s, const float* x, const float* pooled,
                               const float* dout, int64_t n, float* dx, float* dpooled,
                               cudaStream_t stream);

// losses[i] = the BCE of sample i (double); dlogits[i] = (sigmoid(z_i) - y_i) * grad_scale
// (the CPU's hard-label-accurate form). *loss_sum = the losses summed in a fixed tree
// (one block; losses is scratch of n doubles).
void LaunchBceWithLogits(const float* logits, const float* labels, int64_t n, float grad_scale,
                         float* dlogits, double* losses, double* loss_sum, cudaStream_t stream);

}  // namespace dlrm::cuda

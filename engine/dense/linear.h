// Fully connected layer y = act(x W^T + b), W [out x in] row-major (PyTorch's layout).
// Stateless functions over borrowed parameter and gradient memory.
//
// The activation is fused into the pass that adds the bias (forward) and into the pass
// that sums the bias gradient (backward), so each layer makes one element-wise sweep over
// its output beside the GEMMs.
#pragma once

#include <cstdint>

#include "engine/dense/gemm.h"

namespace dlrm {

enum class Activation { kNone, kRelu };

// x [n x in] -> y [n x out]. precision: what the GEMMs multiply (gemm.h; kBf16 for float).
// weights: where W stays packed for the other chunks of the step (gemm.h), or null.
template <typename T>
void LinearForward(const T* x, int64_t n, int in, int out, const T* W, const T* b, Activation act,
                   T* y, GemmPrecision precision = GemmPrecision::kFp32,
                   GemmPackCache* weights = nullptr);

// Backward of LinearForward. y is its output (read only for kRelu). dy [n x out] holds the
// loss gradient w.r.t. y on entry and the gradient w.r.t. the pre-activation on return.
// dW [out x in] = dy^T x and db [out] = column sums of dy are OVERWRITTEN (each chunk
// writes its own partials); dx [n x in] = dy W unless dx is null.
template <typename T>
void LinearBackward(const T* x, const T* y, T* dy, int64_t n, int in, int out, const T* W,
                    Activation act, T* dx, T* dW, T* db,
                    GemmPrecision precision = GemmPrecision::kFp32,
                    GemmPackCache* weights = nullptr);

// The element-wise halves, exposed for tests and micro-benchmarks.
// y [n x out] = act(y + b) in place. ReLU keeps NaN (as PyTorch), so divergence shows.
template <typename T>
void BiasActivationForward(T* y, const T* b, int64_t n, int out, Activation act);
// dy [n x out] zeroed where act is ReLU and y <= 0; db [out] = column sums of the result,
// rows added in order (a chunk's bias gradient is reproducible).
template <typename T>
void ActivationBackwardBiasGrad(const T* y, T* dy, int64_t n, int out, Activation act, T* db);

}  // namespace dlrm

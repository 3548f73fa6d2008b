// Fully connected layer y = x W^T + b, W [out x in] row-major (PyTorch's layout).
// Stateless functions over borrowed parameter and gradient memory.
#pragma once

#include <cstdint>

namespace dlrm {

// x [n x in] -> y [n x out].
template <typename T>
void LinearForward(const T* x, int64_t n, int in, int out, const T* W, const T* b, T* y);

// Given dy [n x out]: dW [out x in] = dy^T x and db [out] = column sums of dy are
// OVERWRITTEN (each chunk writes its own partials); dx [n x in] = dy W unless dx is null.
template <typename T>
void LinearBackward(const T* x, const T* dy, int64_t n, int in, int out, const T* W, T* dx,
                    T* dW, T* db);

// In place y = max(y, 0).
template <typename T>
void ReluForward(T* y, int64_t count);
// dy[i] = 0 where the ReLU output y[i] <= 0.
template <typename T>
void ReluBackward(const T* y, T* dy, int64_t count);

}  // namespace dlrm

#include "engine/dense/linear.h"

#include <algorithm>

#include "engine/dense/gemm.h"

namespace dlrm {

template <typename T>
void LinearForward(const T* x, int64_t n, int in, int out, const T* W, const T* b, T* y) {
  // Seed every row with the bias so the GEMM can accumulate onto it (beta = 1).
  for (int64_t r = 0; r < n; ++r) std::copy(b, b + out, y + r * out);
  Gemm<T>(false, true, n, out, in, T(1), x, in, W, in, T(1), y, out);
}

template <typename T>
void LinearBackward(const T* x, const T* dy, int64_t n, int in, int out, const T* W, T* dx, T* dW,
                    T* db) {
  Gemm<T>(true, false, out, in, n, T(1), dy, out, x, in, T(0), dW, in);
  // Rows are summed in order so a chunk's bias gradient is reproducible.
  std::fill(db, db + out, T(0));
  for (int64_t r = 0; r < n; ++r) {
    const T* row = dy + r * out;
    for (int j = 0; j < out; ++j) db[j] += row[j];
  }
  if (dx != nullptr) Gemm<T>(false, false, n, in, out, T(1), dy, out, W, in, T(0), dx, in);
}

template <typename T>
void ReluForward(T* y, int64_t count) {
  // Written as "negative -> 0" rather than max(): a NaN stays NaN, as in PyTorch, so a
  // diverging model is reported instead of silently masked.
  for (int64_t i = 0; i < count; ++i) {
    if (y[i] < T(0)) y[i] = T(0);
  }
}

template <typename T>
void ReluBackward(const T* y, T* dy, int64_t count) {
  for (int64_t i = 0; i < count; ++i) {
    if (y[i] <= T(0)) dy[i] = T(0);
  }
}

#define DLRM_INSTANTIATE_LINEAR(T)                                                              \
  template void LinearForward<T>(const T*, int64_t, int, int, const T*, const T*, T*);          \
  template void LinearBackward<T>(const T*, const T*, int64_t, int, int, const T*, T*, T*, T*); \
  template void ReluForward<T>(T*, int64_t);                                                    \
  template void ReluBackward<T>(const T*, T*, int64_t);

DLRM_INSTANTIATE_LINEAR(float)
DLRM_INSTANTIATE_LINEAR(double)
#undef DLRM_INSTANTIATE_LINEAR

}  // namespace dlrm

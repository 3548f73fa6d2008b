#include "engine/dense/linear.h"

#include <algorithm>

#include "engine/dense/gemm.h"

namespace dlrm {

// Both sweeps are written branch-free ("v < 0 ? 0 : v") so the compiler vectorizes them:
// a data-dependent branch on the sign mispredicts half the time.
template <typename T>
void BiasActivationForward(T* y, const T* b, int64_t n, int out, Activation act) {
  for (int64_t r = 0; r < n; ++r) {
    T* row = y + r * out;
    if (act == Activation::kRelu) {
      for (int j = 0; j < out; ++j) {
        const T v = row[j] + b[j];
        row[j] = v < T(0) ? T(0) : v;
      }
    } else {
      for (int j = 0; j < out; ++j) row[j] += b[j];
    }
  }
}

template <typename T>
void ActivationBackwardBiasGrad(const T* y, T* dy, int64_t n, int out, Activation act, T* db) {
  std::fill(db, db + out, T(0));
  for (int64_t r = 0; r < n; ++r) {
    T* g = dy + r * out;
    if (act == Activation::kRelu) {
      const T* yr = y + r * out;
      for (int j = 0; j < out; ++j) {
        const T v = yr[j] <= T(0) ? T(0) : g[j];
        g[j] = v;
        db[j] += v;
      }
    } else {
      for (int j = 0; j < out; ++j) db[j] += g[j];
    }
  }
}

template <typename T>
void LinearForward(const T* x, int64_t n, int in, int out, const T* W, const T* b, Activation act,
                   T* y, GemmPrecision precision, GemmPackCache* weights) {
  Gemm<T>(false, true, n, out, in, T(1), x, in, W, in, T(0), y, out, precision, weights);
  BiasActivationForward(y, b, n, out, act);
}

template <typename T>
void LinearBackward(const T* x, const T* y, T* dy, int64_t n, int in, int out, const T* W,
                    Activation act, T* dx, T* dW, T* db, GemmPrecision precision,
                    GemmPackCache* weights) {
  ActivationBackwardBiasGrad(y, dy, n, out, act, db);
  Gemm<T>(true, false, out, in, n, T(1), dy, out, x, in, T(0), dW, in, precision);
  if (dx != nullptr)
    Gemm<T>(false, false, n, in, out, T(1), dy, out, W, in, T(0), dx, in, precision, weights);
}

#define DLRM_INSTANTIATE_LINEAR(T)                                                                 \
  template void LinearForward<T>(const T*, int64_t, int, int, const T*, const T*, Activation, T*,  \
                                 GemmPrecision, GemmPackCache*);                                   \
  template void LinearBackward<T>(const T*, const T*, T*, int64_t, int, int, const T*, Activation, \
                                  T*, T*, T*, GemmPrecision, GemmPackCache*);                      \
  template void BiasActivationForward<T>(T*, const T*, int64_t, int, Activation);                  \
  template void ActivationBackwardBiasGrad<T>(const T*, T*, int64_t, int, Activation, T*);

DLRM_INSTANTIATE_LINEAR(float)
DLRM_INSTANTIATE_LINEAR(double)
#undef DLRM_INSTANTIATE_LINEAR

}  // namespace dlrm

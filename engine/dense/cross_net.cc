#include "engine/dense/cross_net.h"

#include <algorithm>
#include <cmath>

#include "engine/core/philox.h"
#include "engine/core/status.h"
#include "engine/dense/gemm.h"
#include "engine/dense/linear.h"

namespace dlrm {

template <typename T>
CrossNet<T>::CrossNet(int dim, int num_layers, int rank, size_t param_offset,
                      GemmPrecision precision)
    : dim_(dim),
      layers_(num_layers),
      rank_(rank),
      param_offset_(param_offset),
      precision_(precision) {
  if (dim < 1 || dim > (1 << 20))
    ThrowInvalid("cross network: dim must be in [1, 2^20], got ", dim);
  if (num_layers < 1 || num_layers > kMaxLayers)
    ThrowInvalid("cross network: num_layers must be in [1, ", kMaxLayers, "], got ", num_layers);
  if (rank < 0 || rank > dim)
    ThrowInvalid("cross network: rank must be 0 (full rank) or in [1, dim = ", dim, "], got ",
                 rank);
}

template <typename T>
void CrossNet<T>::Initialize(T* params, uint64_t seed, uint64_t stream_base) const {
  auto fill_normal = [&](size_t offset, size_t rows, size_t cols, uint64_t tensor) {
    const CounterRng rng(seed, kStreamDenseBase + stream_base + tensor, 0);
    const double stddev = std::sqrt(2.0 / static_cast<double>(rows + cols));
    for (size_t j = 0; j < rows * cols; ++j)
      params[offset + j] = static_cast<T>(stddev * rng.Normal(j));
  };
  const auto d = static_cast<size_t>(dim_), r = static_cast<size_t>(rank_);
  for (int l = 0; l < layers_; ++l) {
    const uint64_t k = 2 * static_cast<uint64_t>(l);
    if (rank_ == 0) {
      fill_normal(w_offset(l), d, d, k);
    } else {
      fill_normal(v_offset(l), r, d, k);
      fill_normal(u_offset(l), d, r, k + 1);
    }
    std::fill(params + bias_offset(l), params + bias_offset(l) + d, T(0));
  }
}

template <typename T>
const T* CrossNet<T>::Forward(const T* params, const T* x0, int64_t n, T* acts,
                              GemmPackCache* weights) const {
  const int d = dim_, r = rank_;
  const T* x = x0;
  for (int l = 0; l < layers_; ++l) {
    T* h = acts + LayerOffset(l, n);
    T* y = h + n * r;
    T* next = y + n * d;
    if (r == 0) {
      Gemm<T>(false, true, n, d, d, T(1), x, d, params + w_offset(l), d, T(0), y, d, precision_,
              weights);
    } else {
      Gemm<T>(false, true, n, r, d, T(1), x, d, params + v_offset(l), d, T(0), h, r, precision_,
              weights);
      Gemm<T>(false, true, n, d, r, T(1), h, r, params + u_offset(l), r, T(0), y, d, precision_,
              weights);
    }
    CrossSweep(params + bias_offset(l), x0, x, n, y, next);
    x = next;
  }
  return x;
}

template <typename T>
void CrossNet<T>::CrossSweep(const T* b, const T* x0, const T* x, int64_t n, T* y, T* next) const {
  const int d = dim_;
  for (int64_t row = 0; row < n; ++row) {
    const int64_t base = row * d;
    T* __restrict yr = y + base;
    T* __restrict out = next + base;
    const T* __restrict x0r = x0 + base;
    const T* __restrict xr = x + base;
    for (int j = 0; j < d; ++j) {
      const T v = yr[j] + b[j];
      yr[j] = v;
      out[j] = x0r[j] * v + xr[j];
    }
  }
}

template <typename T>
template <bool kFirst>
void CrossNet<T>::ElementwiseBackward(const T* g, const T* x0, const T* y, int64_t n, T* dy, T* dx0,
                                      T* db) const {
  const int d = dim_;
  std::fill(db, db + d, T(0));
  for (int64_t row = 0; row < n; ++row) {
    const int64_t base = row * d;
    const T* __restrict gr = g + base;
    const T* __restrict x0r = x0 + base;
    const T* __restrict yr = y + base;
    T* __restrict dyr = dy + base;
    T* __restrict dx0r = dx0 + base;
    T* __restrict dbr = db;
    // Three loops over the row (it stays in L1): each vectorizes, the fused one did not.
    for (int j = 0; j < d; ++j) dyr[j] = gr[j] * x0r[j];
    for (int j = 0; j < d; ++j) dbr[j] += dyr[j];
    // T(0) + ...: the sum the zero-filled dx0 gave, -0 included.
    if (kFirst) {
      for (int j = 0; j < d; ++j) dx0r[j] = T(0) + gr[j] * yr[j];
    } else {
      for (int j = 0; j < d; ++j) dx0r[j] += gr[j] * yr[j];
    }
  }
}

template <typename T>
void CrossNet<T>::WeightsBackward(const T* params, int l, const T* x, const T* h, const T* dy,
                                  int64_t n, T* grads, T* dh, T* g, GemmPackCache* weights) const {
  const int d = dim_, r = rank_;
  // g += dy (W or U V) in place: the identity path x_{l+1} = ... + x_l keeps g itself.
  if (r == 0) {
    Gemm<T>(true, false, d, d, n, T(1), dy, d, x, d, T(0), grads + w_offset(l), d, precision_);
    Gemm<T>(false, false, n, d, d, T(1), dy, d, params + w_offset(l), d, T(1), g, d, precision_,
            weights);
    return;
  }
  Gemm<T>(true, false, d, r, n, T(1), dy, d, h, r, T(0), grads + u_offset(l), r, precision_);
  Gemm<T>(false, false, n, r, d, T(1), dy, d, params + u_offset(l), r, T(0), dh, r, precision_,
          weights);
  Gemm<T>(true, false, r, d, n, T(1), dh, r, x, d, T(0), grads + v_offset(l), d, precision_);
  Gemm<T>(false, false, n, d, r, T(1), dh, r, params + v_offset(l), d, T(1), g, d, precision_,
          weights);
}

template <typename T>
void CrossNet<T>::Backward(const T* params, const T* x0, const T* acts, const T* dout, int64_t n,
                           T* grads, T* dx0, T* scratch, GemmPackCache* weights) const {
  const int d = dim_, r = rank_;
  T* g = scratch;      // d(loss)/d(x_{l+1}) [n x d], then d(loss)/d(x_l) in place
  T* dy = g + n * d;   // [n x d]
  T* dh = dy + n * d;  // [n x r]
  std::copy(dout, dout + n * d, g);
  for (int l = layers_ - 1; l >= 0; --l) {
    const T* h = acts + LayerOffset(l, n);
    const T* y = h + n * r;
    const T* x = l == 0 ? x0 : acts + LayerOffset(l - 1, n) + n * (r + d);
    if (l == layers_ - 1) {
      ElementwiseBackward<true>(g, x0, y, n, dy, dx0, grads + bias_offset(l));
    } else {
      ElementwiseBackward<false>(g, x0, y, n, dy, dx0, grads + bias_offset(l));
    }
    WeightsBackward(params, l, x, h, dy, n, grads, dh, g, weights);
  }
  for (int64_t i = 0; i < n * d; ++i) dx0[i] += g[i];  // x0 is also the first layer's x
}

template class CrossNet<float>;
template class CrossNet<double>;

}  // namespace dlrm

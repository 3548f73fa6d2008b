#include "engine/dense/interaction.h"

#include <algorithm>
#include <type_traits>
#include <utility>

#include "engine/core/cpu_features.h"
#include "engine/core/status.h"
#include "engine/dense/dot_interaction_avx2.h"

namespace dlrm {
namespace {

template <typename T>
T Dot(const T* a, const T* b, int d) {
  T sum = T(0);
  for (int k = 0; k < d; ++k) sum += a[k] * b[k];
  return sum;
}

// acc += scale * v
template <typename T>
void Axpy(T scale, const T* v, int d, T* acc) {
  for (int k = 0; k < d; ++k) acc[k] += scale * v[k];
}

}  // namespace

template <typename T>
Interaction<T>::Interaction(config::ModelConfig::Interaction kind, int bottom_dim,
                            std::vector<int> feature_dims, bool self_interaction)
    : kind_(kind),
      self_(self_interaction),
      bottom_dim_(bottom_dim),
      dims_(std::move(feature_dims)) {
  if (kind_ != config::ModelConfig::DOT && kind_ != config::ModelConfig::CAT) {
    ThrowInvalid("interaction: unsupported kind ", static_cast<int>(kind_));
  }
  if (self_ && kind_ != config::ModelConfig::DOT)
    ThrowInvalid("interaction: self_interaction is for DOT only");
  if (bottom_dim_ <= 0) {
    ThrowInvalid("interaction: bottom MLP output dim must be > 0, got ", bottom_dim_);
  }
  offsets_.reserve(dims_.size());
  for (size_t f = 0; f < dims_.size(); ++f) {
    if (dims_[f] <= 0) {
      ThrowInvalid("interaction: sparse feature ", f, " dim must be > 0, got ", dims_[f]);
    }
    if (kind_ == config::ModelConfig::DOT && dims_[f] != bottom_dim_) {
      ThrowInvalid(
          "interaction DOT needs every sparse feature dim to equal the bottom MLP "
          "output dim ",
          bottom_dim_, ", but feature ", f, " has dim ", dims_[f], " (use CAT for unequal dims)");
    }
    offsets_.push_back(pooled_width_);
    pooled_width_ += dims_[f];
  }
  const int vectors = static_cast<int>(dims_.size()) + (self_ ? 1 : 0);
  out_dim_ = kind_ == config::ModelConfig::DOT ? bottom_dim_ + vectors * (vectors + 1) / 2
                                               : bottom_dim_ + pooled_width_;
  use_avx2_ = std::is_same<T, float>::value && kind_ == config::ModelConfig::DOT &&
              bottom_dim_ % 8 == 0 && CpuHasAvx2Fma();
}

template <typename T>
void Interaction<T>::Forward(const T* x, const T* pooled, int64_t n, T* out) const {
  const int d = bottom_dim_;
  const int num_features = static_cast<int>(dims_.size());
  for (int64_t r = 0; r < n; ++r) {
    const T* xr = x + r * d;
    const T* pr = pooled + r * pooled_width_;
    T* o = out + r * out_dim_;
    o = std::copy(xr, xr + d, o);
    if (kind_ == config::ModelConfig::CAT) {
      std::copy(pr, pr + pooled_width_, o);
      continue;
    }
    if constexpr (std::is_same<T, float>::value) {
      if (use_avx2_) {
        DotInteractionForwardAvx2(xr, pr, num_features, d, self_, o);
        continue;
      }
    }
    // z_0 = x, z_i = e_i; pairs (i, j) with j < i (j <= i with self), row by row.
    auto z = [&](int i) { return i == 0 ? xr : pr + offsets_[i - 1]; };
    const int diagonal = self_ ? 1 : 0;
    for (int i = 1 - diagonal; i <= num_features; ++i) {
      for (int j = 0; j < i + diagonal; ++j) *o++ = Dot(z(i), z(j), d);
    }
  }
}

template <typename T>
void Interaction<T>::Backward(const T* x, const T* pooled, const T* dout, int64_t n, T* dx,
                              T* dpooled) const {
  const int d = bottom_dim_;
  const int num_features = static_cast<int>(dims_.size());
  std::vector<T> scratch(use_avx2_ ? static_cast<size_t>(num_features + 1) * (num_features + 1)
                                   : 0);
  for (int64_t r = 0; r < n; ++r) {
    const T* xr = x + r * d;
    const T* pr = pooled + r * pooled_width_;
    const T* g = dout + r * out_dim_;
    T* dxr = dx + r * d;
    T* dpr = dpooled + r * pooled_width_;
    std::copy(g, g + d, dxr);
    g += d;
    if (kind_ == config::ModelConfig::CAT) {
      std::copy(g, g + pooled_width_, dpr);
      continue;
    }
    if constexpr (std::is_same<T, float>::value) {
      if (use_avx2_) {
        DotInteractionBackwardAvx2(xr, pr, g, num_features, d, self_, dxr, dpr, scratch.data());
        continue;
      }
    }
    std::fill(dpr, dpr + pooled_width_, T(0));
    auto z = [&](int i) { return i == 0 ? xr : pr + offsets_[i - 1]; };
    auto dz = [&](int i) { return i == 0 ? dxr : dpr + offsets_[i - 1]; };
    // d<z_i, z_j> / dz_i = z_j and vice versa (both for i == j: 2 z_i); accumulated in the
    // forward's pair order.
    const int diagonal = self_ ? 1 : 0;
    for (int i = 1 - diagonal; i <= num_features; ++i) {
      for (int j = 0; j < i + diagonal; ++j) {
        const T gij = *g++;
        Axpy(gij, z(j), d, dz(i));
        Axpy(gij, z(i), d, dz(j));
      }
    }
  }
}

template class Interaction<float>;
template class Interaction<double>;

}  // namespace dlrm

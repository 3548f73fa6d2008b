// Binary cross-entropy on logits in the numerically stable form
//   l(z, y) = max(z, 0) - z*y + log1p(exp(-|z|)).
#pragma once

#include <cmath>
#include <cstdint>

namespace dlrm {

template <typename T>
inline T StableSigmoid(T z) {
  if (z >= 0) return T(1) / (T(1) + std::exp(-z));
  const T e = std::exp(z);
  return e / (T(1) + e);
}

// Returns the SUM of the n losses (in double). If dlogits is not null it receives
// (sigmoid(z_i) - y_i) * grad_scale (grad_scale = 1/B for a batch mean).
template <typename T>
double BceWithLogits(const T* logits, const float* labels, int64_t n, T grad_scale, T* dlogits);

}  // namespace dlrm

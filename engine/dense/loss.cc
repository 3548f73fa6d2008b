#include "engine/dense/loss.h"

#include <algorithm>

namespace dlrm {

template <typename T>
double BceWithLogits(const T* logits, const float* labels, int64_t n, T grad_scale, T* dlogits) {
  double total = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    // Evaluated in double even for a float model: it costs little at one value per sample
    // and the reported loss should not depend on the model's precision.
    const double z = static_cast<double>(logits[i]);
    const double y = static_cast<double>(labels[i]);
    // exp of a non-positive number only: finite for every finite z.
    const double e = std::exp(-std::abs(z));
    total += std::max(z, 0.0) - z * y + std::log1p(e);
    if (dlogits != nullptr) {
      // sigmoid(z) - y rewritten as (1 - y) sigmoid(z) - y sigmoid(-z): with a hard label
      // the gradient keeps its relative accuracy at large |z| (e.g. -2e-22 at z = 50, y = 1)
      // instead of cancelling to 0 in 1 - sigmoid(z).
      const double sigmoid_abs = 1.0 / (1.0 + e);    // sigmoid(|z|)
      const double sigmoid_neg_abs = e / (1.0 + e);  // sigmoid(-|z|)
      const double sigmoid_z = z >= 0 ? sigmoid_abs : sigmoid_neg_abs;
      const double sigmoid_minus_z = z >= 0 ? sigmoid_neg_abs : sigmoid_abs;
      const double grad = (1.0 - y) * sigmoid_z - y * sigmoid_minus_z;
      dlogits[i] = static_cast<T>(grad * static_cast<double>(grad_scale));
    }
  }
  return total;
}

template double BceWithLogits<float>(const float*, const float*, int64_t, float, float*);
template double BceWithLogits<double>(const double*, const float*, int64_t, double, double*);

}  // namespace dlrm

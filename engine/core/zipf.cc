#include "engine/core/zipf.h"

#include <algorithm>
#include <cmath>

namespace dlrm {
namespace {

// log1p(x) / x, continuous at 0.
double Helper1(double x) {
  return std::abs(x) > 1e-8 ? std::log1p(x) / x : 1.0 - x * (0.5 - x * (1.0 / 3.0 - x * 0.25));
}
// expm1(x) / x, continuous at 0.
double Helper2(double x) {
  return std::abs(x) > 1e-8 ? std::expm1(x) / x
                            : 1.0 + x * 0.5 * (1.0 + x * (1.0 / 3.0) * (1.0 + x * 0.25));
}
double H(double x, double s) { return std::exp(-s * std::log(x)); }
double HIntegral(double x, double s) {
  const double log_x = std::log(x);
  return Helper2((1.0 - s) * log_x) * log_x;
}
double HIntegralInverse(double x, double s) {
  // Rounding can push t just below -1, where log1p is undefined.
  const double t = std::max(x * (1.0 - s), -1.0);
  return std::exp(Helper1(t) * x);
}

}  // namespace

ZipfSampler::ZipfSampler(double exponent, double num_ranks)
    : s_(exponent),
      n_(num_ranks),
      h_integral_x1_(HIntegral(1.5, exponent) - 1.0),
      h_integral_n_(HIntegral(num_ranks + 0.5, exponent)),
      squeeze_(2.0 - HIntegralInverse(HIntegral(2.5, exponent) - H(2.0, exponent), exponent)) {}

std::optional<double> ZipfSampler::TryRank(double unit) const {
  const double u = h_integral_n_ + unit * (h_integral_x1_ - h_integral_n_);
  const double x = HIntegralInverse(u, s_);
  const double k = std::min(std::max(std::floor(x + 0.5), 1.0), n_);
  if (k - x <= squeeze_ || u >= HIntegral(k + 0.5, s_) - H(k, s_)) return k;
  return std::nullopt;
}

}  // namespace dlrm

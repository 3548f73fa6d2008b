// Zipf(s) ranks in [1, n] by rejection-inversion (Hormann & Derflinger 1996): invert an
// antiderivative H of h(x) = x^-s over a hat function and accept with a cheap squeeze
// test; O(1) per draw with no table, for any n (the synthetic data generator, bench data).
#pragma once

#include <optional>

namespace dlrm {

class ZipfSampler {
 public:
  // exponent > 0; num_ranks >= 1 (a double: ranges up to 2^40 and beyond).
  ZipfSampler(double exponent, double num_ranks);

  // One attempt with a uniform `unit` in (0, 1): the rank if accepted, nullopt if the
  // caller must try again with another uniform (rare: the hat hugs h closely).
  std::optional<double> TryRank(double unit) const;

 private:
  double s_, n_;
  double h_integral_x1_, h_integral_n_, squeeze_;
};

}  // namespace dlrm

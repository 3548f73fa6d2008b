// The check a training step makes before it changes any parameter, shared by the
// single-process engine and the distributed trainer so both fail alike.
#pragma once

#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "engine/core/status.h"

namespace dlrm {

// Whether every value added is finite. A value is not finite when its exponent bits are
// all ones; testing the bits with an OR (no branch, no early exit) lets the compiler
// vectorize a loop that adds every value of an array.
template <typename T>
class FiniteCheck {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>);
  using Bits = std::conditional_t<std::is_same_v<T, float>, uint32_t, uint64_t>;
  static constexpr int kMantissaBits = std::numeric_limits<T>::digits - 1;
  static constexpr int kExponentBits = static_cast<int>(8 * sizeof(T)) - 1 - kMantissaBits;
  static constexpr Bits kExponent = ((Bits{1} << kExponentBits) - 1) << kMantissaBits;

 public:
  void Add(T v) {
    Bits bits;
    std::memcpy(&bits, &v, sizeof bits);
    not_finite_ |= static_cast<Bits>((bits & kExponent) == kExponent);
  }
  bool ok() const { return not_finite_ == 0; }

 private:
  Bits not_finite_ = 0;
};

// It runs over every gradient of every step.
template <typename T>
bool AllFinite(const std::vector<T>& values) {
  FiniteCheck<T> check;
  for (const T v : values) check.Add(v);
  return check.ok();
}

// kFailedPrecondition for a step whose loss or gradients are not finite.
[[noreturn]] inline void ThrowDiverged(int64_t step, double loss) {
  Throw(StatusCode::kFailedPrecondition, "training diverged at step ", step,
        ": the loss or a gradient is not finite (loss = ", loss,
        "); parameters were not updated. Lower the learning rate.");
}

}  // namespace dlrm

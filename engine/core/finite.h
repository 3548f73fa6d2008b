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

// A value is not finite when its exponent bits are all ones. Testing the bits with an
// OR over the whole array (no early exit) lets the compiler vectorize the loop; it runs
// over every gradient of every step.
template <typename T>
bool AllFinite(const std::vector<T>& values) {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>);
  using Bits = std::conditional_t<std::is_same_v<T, float>, uint32_t, uint64_t>;
  constexpr int kMantissaBits = std::numeric_limits<T>::digits - 1;
  constexpr int kExponentBits = static_cast<int>(8 * sizeof(T)) - 1 - kMantissaBits;
  constexpr Bits kExponent = ((Bits{1} << kExponentBits) - 1) << kMantissaBits;
  Bits not_finite = 0;
  for (const T v : values) {
    Bits bits;
    std::memcpy(&bits, &v, sizeof bits);
    not_finite |= static_cast<Bits>((bits & kExponent) == kExponent);
  }
  return not_finite == 0;
}

// kFailedPrecondition for a step whose loss or gradients are not finite.
[[noreturn]] inline void ThrowDiverged(int64_t step, double loss) {
  Throw(StatusCode::kFailedPrecondition, "training diverged at step ", step,
        ": the loss or a gradient is not finite (loss = ", loss,
        "); parameters were not updated. Lower the learning rate.");
}

}  // namespace dlrm

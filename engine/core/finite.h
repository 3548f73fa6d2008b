// The check a training step makes before it changes any parameter, shared by the
// single-process engine and the distributed trainer so both fail alike.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "engine/core/status.h"

namespace dlrm {

template <typename T>
bool AllFinite(const std::vector<T>& values) {
  for (const T v : values) {
    if (!std::isfinite(v)) return false;
  }
  return true;
}

// kFailedPrecondition for a step whose loss or gradients are not finite.
[[noreturn]] inline void ThrowDiverged(int64_t step, double loss) {
  Throw(StatusCode::kFailedPrecondition, "training diverged at step ", step,
        ": the loss or a gradient is not finite (loss = ", loss,
        "); parameters were not updated. Lower the learning rate.");
}

}  // namespace dlrm

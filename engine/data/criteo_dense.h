// The Criteo dense-feature transform, shared by the TSV reader and the synthetic
// generator so that a sample generated in memory and the same sample read back from its
// TSV file agree bit for bit.
#pragma once

#include <cmath>
#include <cstdint>

namespace dlrm {

// log(1 + x) for x > 0, else 0 (the DLRM reference preprocessing; Criteo has a few
// negative counts, which carry no usable magnitude).
inline float CriteoDenseValue(int64_t x) {
  return x > 0 ? static_cast<float>(std::log1p(static_cast<double>(x))) : 0.0f;
}

}  // namespace dlrm

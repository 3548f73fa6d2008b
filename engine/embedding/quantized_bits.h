// The tail of a row-wise quantized row (quantized_row.h): the row's scale and bias, each
// an IEEE binary16 (fp16) value in the host's byte order (little-endian on every machine
// the engine supports), after the codes, as FBGEMM's table-batched
// inference rows carry them. One definition for the CPU's kernels and the CUDA backend's
// (engine/cuda), so both read the same values.
//
// Every function is pure; DLRM_HOST_DEVICE (philox.h) makes them device functions too
// under nvcc. Threading: none. Errors: none.
#pragma once

#include <cstdint>
#include <cstring>

#include "engine/core/philox.h"  // DLRM_HOST_DEVICE
#include "engine/embedding/half_bits.h"

namespace dlrm::quantized_bits {

// Bytes of the scale and bias after a row's codes: two fp16 values.
inline constexpr int64_t kScaleBiasBytes = 2 * sizeof(uint16_t);
// The largest magnitude they hold (FP16's largest finite value): a row with a value beyond
// it cannot be quantized.
inline constexpr float kMaxMagnitude = half_bits::kFp16MaxValue;

// The scale and bias of a row whose codes end at `tail` (unaligned), widened exactly.
DLRM_HOST_DEVICE inline void ReadScaleBias(const uint8_t* tail, float* scale, float* bias) {
  uint16_t bits[2];
  memcpy(bits, tail, sizeof bits);
  *scale = half_bits::Fp16Widen(bits[0]);
  *bias = half_bits::Fp16Widen(bits[1]);
}

// Writes the fp16 bits of scale and bias at `tail`.
inline void WriteScaleBias(uint16_t scale, uint16_t bias, uint8_t* tail) {
  const uint16_t bits[2] = {scale, bias};
  std::memcpy(tail, bits, sizeof bits);
}

}  // namespace dlrm::quantized_bits

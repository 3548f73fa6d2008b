// One 16-bit value of a BF16 / FP16 row, widened and narrowed, and the random bits of its
// stochastic rounding: the scalar definitions half_row.h's kernels and the CUDA backend's
// (engine/cuda) share, so that a row rounds to the same bits on either device.
//
// Formats: BF16 is the top half of an fp32 (8 exponent bits, 7 mantissa bits); FP16 is
// IEEE binary16 (5 and 10, largest finite 65504). Widening is exact (an FP16 NaN made
// quiet, as F16C widens). Narrowing keeps NaN a quiet NaN and infinities infinite, and
// stores a finite value beyond the format's largest finite one as that value
// (saturating). Nearest is ties-to-even; stochastic adds 16 random bits below the kept
// precision (the top 16 of the dropped bits for FP16 subnormals) and truncates.
//
// Every function is pure; DLRM_HOST_DEVICE (philox.h) makes them device functions too
// under nvcc. Threading: none. Errors: none.
#pragma once

#include <cstdint>
#include <cstring>

#include "engine/core/philox.h"

namespace dlrm::half_bits {

inline constexpr uint32_t kFp16MaxFinite = 0x7BFF, kBf16MaxFinite = 0x7F7F;
inline constexpr float kFp16MaxValue = 65504.0f;  // kFp16MaxFinite's value
// Columns that share one Philox call's 128 random bits (16 each).
inline constexpr int32_t kRandomBlock = 8;

DLRM_HOST_DEVICE inline uint32_t BitsOf(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
#endif
}

DLRM_HOST_DEVICE inline float FloatOfBits(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
#endif
}

DLRM_HOST_DEVICE inline float Bf16Widen(uint16_t h) {
  return FloatOfBits(static_cast<uint32_t>(h) << 16);
}

DLRM_HOST_DEVICE inline float Fp16Widen(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t e = (h >> 10) & 0x1Fu, m = h & 0x3FFu;
  if (e == 0x1F)  // infinity, or NaN made quiet (as F16C widens)
    return FloatOfBits(sign | 0x7F800000u | (m << 13) | (m != 0 ? 0x400000u : 0u));
  if (e == 0) {  // zero or subnormal: m * 2^-24, exact
    const float magnitude = static_cast<float>(m) * 5.9604644775390625e-08f;
    return sign != 0 ? -magnitude : magnitude;
  }
  return FloatOfBits(sign | ((e + 112) << 23) | (m << 13));
}

// BF16: the top 16 bits of x after adding `increment` to it (0x7FFF plus the kept part's
// lowest bit to round to nearest even, a random 16 bits to round stochastically).
DLRM_HOST_DEVICE inline uint16_t Bf16Narrow(float x, bool stochastic, uint16_t random) {
  const uint32_t u = BitsOf(x), a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  if (a == 0x7F800000u) return static_cast<uint16_t>(u >> 16);
  const uint32_t increment = stochastic ? random : 0x7FFFu + ((u >> 16) & 1u);
  uint32_t r = (u + increment) >> 16;
  if ((r & 0x7FFFu) == 0x7F80u) r = ((u >> 16) & 0x8000u) | kBf16MaxFinite;
  return static_cast<uint16_t>(r);
}

// Whether the dropped bits `rem` (of `shift` bits) carry the kept ones `base` up.
DLRM_HOST_DEVICE inline bool RoundsUp(uint64_t base, uint64_t rem, int shift, bool stochastic,
                                      uint16_t random) {
  if (stochastic) {
    const uint64_t top16 = shift >= 16 ? rem >> (shift - 16) : rem << (16 - shift);
    return top16 + random >= 0x10000u;
  }
  const uint64_t half = uint64_t{1} << (shift - 1);
  return rem > half || (rem == half && (base & 1u) != 0);
}

DLRM_HOST_DEVICE inline uint16_t Fp16Narrow(float x, bool stochastic, uint16_t random) {
  const uint32_t u = BitsOf(x), a = u & 0x7FFFFFFFu;
  const auto sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  if (a > 0x7F800000u) return static_cast<uint16_t>(sign | 0x7E00u | ((a >> 13) & 0x3FFu));
  if (a == 0x7F800000u) return static_cast<uint16_t>(sign | 0x7C00u);
  const int e = static_cast<int>(a >> 23) - 127;
  if (e >= 16) return static_cast<uint16_t>(sign | kFp16MaxFinite);
  // Below 2^-40 even 16 random bits cannot reach the smallest subnormal (2^-24).
  if (e < -40) return sign;
  uint64_t base, rem;
  int shift;
  if (e >= -14) {  // a normal FP16: 13 mantissa bits dropped
    shift = 13;
    base = (static_cast<uint64_t>(e + 15) << 10) | ((a & 0x7FFFFFu) >> 13);
    rem = a & 0x1FFFu;
  } else {  // a subnormal one: the significand with its leading 1, shifted further
    shift = -1 - e;
    const uint64_t m = (a & 0x7FFFFFu) | 0x800000u;
    base = m >> shift;
    rem = m & ((uint64_t{1} << shift) - 1);
  }
  uint64_t r = base + (RoundsUp(base, rem, shift, stochastic, random) ? 1u : 0u);
  if (r >= 0x7C00u) r = kFp16MaxFinite;  // a carry past the largest finite value
  return static_cast<uint16_t>(sign | r);
}

DLRM_HOST_DEVICE inline float Widen(uint16_t h, bool bf16) {
  return bf16 ? Bf16Widen(h) : Fp16Widen(h);
}

DLRM_HOST_DEVICE inline uint16_t Narrow(float x, bool bf16, bool stochastic, uint16_t random) {
  return bf16 ? Bf16Narrow(x, stochastic, random) : Fp16Narrow(x, stochastic, random);
}

// The Philox key of table `table`'s stochastic rounding under the engine's seed.
DLRM_HOST_DEVICE inline uint64_t RoundingKey(uint64_t seed, int32_t table) {
  return seed ^ ((kStreamRoundingBase + static_cast<uint64_t>(table)) * 0x9E3779B97F4A7C15ULL);
}

// The 16 random bits of columns [k0, k0 + 8) of `row` at `step` (k0 a multiple of 8): the
// Philox block of counter (step, row << 16 ^ k0 / 8), 16 bits a column. dim < 2^19,
// row < 2^47.
DLRM_HOST_DEVICE inline void RoundingWords(uint64_t key, int64_t step, int64_t row, int32_t k0,
                                           uint16_t out[kRandomBlock]) {
  uint32_t words[4];
  Philox4x32Words(key, static_cast<uint64_t>(step),
                  (static_cast<uint64_t>(row) << 16) ^ static_cast<uint64_t>(k0 / kRandomBlock),
                  words);
  for (int32_t i = 0; i < kRandomBlock; ++i)
    out[i] = static_cast<uint16_t>(words[i / 2] >> ((i & 1) * 16));
}

// Column k's word of RoundingWords.
DLRM_HOST_DEVICE inline uint16_t RoundingWord(uint64_t key, int64_t step, int64_t row, int32_t k) {
  uint16_t words[kRandomBlock];
  RoundingWords(key, step, row, k - k % kRandomBlock, words);
  return words[k % kRandomBlock];
}

}  // namespace dlrm::half_bits

// Counter-based random numbers (Philox4x32-10, Salmon et al., SC'11).
//
// Every random value in the engine is a pure function of (seed, stream, index): a table
// row's initial value depends only on (seed, table, row), never on thread count,
// sharding or the order in which rows are first seen. No generator state to share.
#pragma once

#include <array>
#include <cmath>
#include <cstdint>

// Functions CUDA code calls on the device too (compiled by nvcc: __host__ __device__).
#if defined(__CUDACC__)
#define DLRM_HOST_DEVICE __host__ __device__
#else
#define DLRM_HOST_DEVICE
#endif

namespace dlrm {

// out = 4 independent 32-bit random words for the 128-bit counter (c_hi, c_lo) under the
// 64-bit key; the one definition the CPU and the GPU share.
DLRM_HOST_DEVICE inline void Philox4x32Words(uint64_t key, uint64_t c_hi, uint64_t c_lo,
                                             uint32_t out[4]) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  uint32_t c0 = static_cast<uint32_t>(c_lo), c1 = static_cast<uint32_t>(c_lo >> 32);
  uint32_t c2 = static_cast<uint32_t>(c_hi), c3 = static_cast<uint32_t>(c_hi >> 32);
  uint32_t k0 = static_cast<uint32_t>(key), k1 = static_cast<uint32_t>(key >> 32);
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = static_cast<uint64_t>(kM0) * c0;
    const uint64_t p1 = static_cast<uint64_t>(kM1) * c2;
    const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    c0 = hi1 ^ c1 ^ k0;
    c1 = lo1;
    c2 = hi0 ^ c3 ^ k1;
    c3 = lo0;
    k0 += kW0;
    k1 += kW1;
  }
  out[0] = c0;
  out[1] = c1;
  out[2] = c2;
  out[3] = c3;
}

// Philox4x32Words as an array.
inline std::array<uint32_t, 4> Philox4x32(uint64_t key, uint64_t c_hi, uint64_t c_lo) {
  std::array<uint32_t, 4> words;
  Philox4x32Words(key, c_hi, c_lo, words.data());
  return words;
}

// Uniform in the open interval (0, 1), from the top 24 bits (exact in float and double).
inline double UnitFromBits(uint32_t bits) { return ((bits >> 8) + 0.5) * (1.0 / 16777216.0); }

// A stream of uniform / normal variates addressed by (seed, stream, index); draw(j) is the
// j-th value of that address and costs one Philox call per 4 uniforms.
class CounterRng {
 public:
  CounterRng(uint64_t seed, uint64_t stream, uint64_t index)
      : seed_(seed), stream_(stream), index_(index) {}

  // j-th uniform in (0, 1).
  double Uniform(uint64_t j) const {
    const auto words = Philox4x32(seed_, stream_, (index_ << 20) ^ (j >> 2));
    return UnitFromBits(words[j & 3]);
  }
  // j-th standard normal (Box-Muller over uniforms 2j and 2j+1).
  double Normal(uint64_t j) const {
    const double u1 = Uniform(2 * j), u2 = Uniform(2 * j + 1);
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }

 private:
  uint64_t seed_, stream_, index_;
};

// Streams used by the engine, so that no two consumers draw the same numbers.
enum RngStream : uint64_t {
  kStreamEmbeddingBase = 1ull << 40,  // + table index
  kStreamDenseBase = 2ull << 40,      // + parameter index
  kStreamSynthetic = 3ull << 40,      // data generator
  kStreamDynamicBase = 4ull << 40,    // + table index (| the id's top bits): dynamic rows
  kStreamAdmission = 5ull << 40,      // + table index: dynamic tables' admission draws
  kStreamRoundingBase = 6ull << 40,   // + table index: BF16 / FP16 stochastic rounding
};

}  // namespace dlrm

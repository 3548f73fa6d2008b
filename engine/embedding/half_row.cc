#include "engine/embedding/half_row.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <type_traits>

#include "engine/core/cpu_features.h"
#include "engine/core/prefetch.h"
#include "engine/core/status.h"
#include "engine/embedding/column_blocks.h"
#include "engine/embedding/half_bits.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace dlrm {
namespace {

// How many rows of a bag ahead of the one being added the next is prefetched.
constexpr int64_t kPrefetchRows = 8;
// Columns that share one Philox call's 128 random bits (16 each).
constexpr int32_t kBlock = half_bits::kRandomBlock;
using half_bits::kBf16MaxFinite;

uint16_t Narrow(float x, TablePrecision precision, bool stochastic, uint16_t random) {
  return half_bits::Narrow(x, precision == config::TableConfig::BF16, stochastic, random);
}

// The random bits of the row's columns [k0, k0 + 8) (k0 a multiple of 8): one Philox call
// when the row's columns start on a block of the whole table's (col_begin a multiple of
// 8, as every unsharded table's), else the two blocks they straddle.
std::array<uint16_t, kBlock> RandomBlock(const HalfRounding& rounding, int64_t step, int64_t row,
                                         int32_t k0) {
  const uint64_t key = half_bits::RoundingKey(rounding.seed, rounding.table);
  const int64_t whole_row = rounding.row_begin + row;
  const int32_t first = rounding.col_begin + k0, skip = first % kBlock;
  std::array<uint16_t, kBlock> bits;
  if (skip == 0) {
    half_bits::RoundingWords(key, step, whole_row, first, bits.data());
    return bits;
  }
  std::array<uint16_t, 2 * kBlock> both;
  half_bits::RoundingWords(key, step, whole_row, first - skip, both.data());
  half_bits::RoundingWords(key, step, whole_row, first - skip + kBlock, both.data() + kBlock);
  std::copy(both.begin() + skip, both.begin() + skip + kBlock, bits.begin());
  return bits;
}

#if defined(__x86_64__)
#define DLRM_F16C_TARGET __attribute__((target("avx2,f16c")))

template <bool kBf16>
DLRM_F16C_TARGET inline __m256 Widen8(const uint16_t* p) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  if constexpr (kBf16) return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  return _mm256_cvtph_ps(h);
}

// Bf16Narrow of 8 values with 8 increments.
DLRM_F16C_TARGET inline __m128i NarrowBf16x8(__m256 x, __m256i increment) {
  const __m256i u = _mm256_castps_si256(x);
  const __m256i a = _mm256_and_si256(u, _mm256_set1_epi32(0x7FFFFFFF));
  const __m256i nan = _mm256_cmpgt_epi32(a, _mm256_set1_epi32(0x7F800000));
  const __m256i inf = _mm256_cmpeq_epi32(a, _mm256_set1_epi32(0x7F800000));
  const __m256i high = _mm256_srli_epi32(u, 16);
  __m256i r = _mm256_srli_epi32(_mm256_add_epi32(u, increment), 16);
  const __m256i past =
      _mm256_andnot_si256(inf, _mm256_cmpeq_epi32(_mm256_and_si256(r, _mm256_set1_epi32(0x7FFF)),
                                                  _mm256_set1_epi32(0x7F80)));
  const __m256i largest = _mm256_or_si256(_mm256_and_si256(high, _mm256_set1_epi32(0x8000)),
                                          _mm256_set1_epi32(static_cast<int>(kBf16MaxFinite)));
  r = _mm256_blendv_epi8(r, largest, past);
  r = _mm256_blendv_epi8(r, _mm256_or_si256(high, _mm256_set1_epi32(0x40)), nan);
  const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08);
  return _mm256_castsi256_si128(packed);
}

DLRM_F16C_TARGET inline __m256i NearestEvenIncrement(__m256 x) {
  const __m256i lowest_kept =
      _mm256_and_si256(_mm256_srli_epi32(_mm256_castps_si256(x), 16), _mm256_set1_epi32(1));
  return _mm256_add_epi32(_mm256_set1_epi32(0x7FFF), lowest_kept);
}

// Fp16Narrow to nearest of 8 values: finite values past the largest are held at it
// first, so F16C's rounding never reaches infinity; NaN and infinities pass unchanged.
DLRM_F16C_TARGET inline __m128i NarrowFp16x8(__m256 x) {
  const __m256 sign = _mm256_and_ps(x, _mm256_castsi256_ps(_mm256_set1_epi32(INT32_MIN)));
  const __m256 a = _mm256_andnot_ps(_mm256_castsi256_ps(_mm256_set1_epi32(INT32_MIN)), x);
  const __m256 past = _mm256_and_ps(_mm256_cmp_ps(a, _mm256_set1_ps(65504.0f), _CMP_GT_OQ),
                                    _mm256_cmp_ps(a, _mm256_set1_ps(INFINITY), _CMP_LT_OQ));
  const __m256 held = _mm256_blendv_ps(x, _mm256_or_ps(sign, _mm256_set1_ps(65504.0f)), past);
  return _mm256_cvtps_ph(held, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}

// The first dim - dim % 8 columns; returns how many.
DLRM_F16C_TARGET int32_t DecodeAvx2(const uint16_t* row, int32_t dim, TablePrecision precision,
                                    float* out) {
  const int32_t end = dim - dim % kBlock;
  const bool bf16 = precision == config::TableConfig::BF16;
  for (int32_t k = 0; k < end; k += kBlock)
    _mm256_storeu_ps(out + k, bf16 ? Widen8<true>(row + k) : Widen8<false>(row + k));
  return end;
}

// Columns [0, end) of a BF16 row rounded to nearest even, 16 at a time (one 32-byte
// store). Where none of the 16 values is infinite, NaN or within 0xFFFF of infinity's bits
// (the rows' usual case), adding the increment and dropping the low 16 bits is
// Bf16Narrow exactly (no saturation, no quieting); a block holding such a value takes
// NarrowBf16x8's checks. Returns end, a multiple of 16.
DLRM_F16C_TARGET int32_t EncodeBf16Nearest16(const float* values, int32_t dim, uint16_t* out) {
  const int32_t end = dim - dim % (2 * kBlock);
  const __m256i magnitude = _mm256_set1_epi32(0x7FFFFFFF), limit = _mm256_set1_epi32(0x7F7F0000);
  const __m256i half = _mm256_set1_epi32(0x7FFF), one = _mm256_set1_epi32(1);
  for (int32_t k = 0; k < end; k += 2 * kBlock) {
    const __m256i u0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(values + k));
    const __m256i u1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(values + k + kBlock));
    const __m256i big = _mm256_or_si256(_mm256_cmpgt_epi32(_mm256_and_si256(u0, magnitude), limit),
                                        _mm256_cmpgt_epi32(_mm256_and_si256(u1, magnitude), limit));
    if (_mm256_testz_si256(big, big) == 0) {
      for (int32_t j = k; j < k + 2 * kBlock; j += kBlock) {
        const __m256 x = _mm256_loadu_ps(values + j);
        _mm_storeu_si128(reinterpret_cast<__m128i*>(out + j),
                         NarrowBf16x8(x, NearestEvenIncrement(x)));
      }
      continue;
    }
    // The increment: 0x7FFF plus the kept part's lowest bit (ties to even), as
    // NearestEvenIncrement, with its constants kept out of the loop (calling it rebuilt them
    // each block: 5-15% slower on this VM's 64-value rows).
    const __m256i i0 = _mm256_add_epi32(half, _mm256_and_si256(_mm256_srli_epi32(u0, 16), one));
    const __m256i i1 = _mm256_add_epi32(half, _mm256_and_si256(_mm256_srli_epi32(u1, 16), one));
    const __m256i r0 = _mm256_srli_epi32(_mm256_add_epi32(u0, i0), 16);
    const __m256i r1 = _mm256_srli_epi32(_mm256_add_epi32(u1, i1), 16);
    // packus interleaves the 128-bit lanes (r0 low, r1 low, r0 high, r1 high): reorder.
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(r0, r1), 0xD8);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + k), packed);
  }
  return end;
}

DLRM_F16C_TARGET int32_t EncodeAvx2(const float* values, int32_t dim, TablePrecision precision,
                                    const HalfRounding& rounding, int64_t step, int64_t row,
                                    uint16_t* out) {
  const bool bf16 = precision == config::TableConfig::BF16;
  const bool stochastic = rounding.mode == config::TableConfig::STOCHASTIC;
  if (stochastic && !bf16) return 0;  // FP16's stochastic rounding: the portable loop
  const int32_t end = dim - dim % kBlock;
  const int32_t begin = bf16 && !stochastic ? EncodeBf16Nearest16(values, dim, out) : 0;
  for (int32_t k = begin; k < end; k += kBlock) {
    const __m256 x = _mm256_loadu_ps(values + k);
    __m128i h;
    if (stochastic) {
      const std::array<uint16_t, kBlock> bits = RandomBlock(rounding, step, row, k);
      const __m128i random = _mm_loadu_si128(reinterpret_cast<const __m128i*>(bits.data()));
      h = NarrowBf16x8(x, _mm256_cvtepu16_epi32(random));
    } else {
      h = bf16 ? NarrowBf16x8(x, NearestEvenIncrement(x)) : NarrowFp16x8(x);
    }
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + k), h);
  }
  return end;
}

// Columns [col, col + V * 8) of a bag, whole: acc = sum_j w_j * row_j in registers (a
// product, then a sum: no fused multiply-add, as the portable loop), / count for MEAN,
// stored once. Prefetches only when asked (the first block).
template <int V, bool kBf16>
DLRM_F16C_TARGET void PoolHalfBlock(const void* const* rows, int32_t dim, int64_t count,
                                    int64_t available, const float* weights, bool mean, int32_t col,
                                    float* out, bool prefetch) {
  __m256 acc[V];
  for (int v = 0; v < V; ++v) acc[v] = _mm256_setzero_ps();
  const auto row_bytes = static_cast<size_t>(dim) * sizeof(uint16_t);
  for (int64_t j = 0; j < count; ++j) {
    if (prefetch && j + kPrefetchRows < available)
      PrefetchLines(rows[j + kPrefetchRows], row_bytes);
    const uint16_t* row = static_cast<const uint16_t*>(rows[j]) + col;
    const __m256 w = _mm256_set1_ps(weights ? weights[j] : 1.0f);
    for (int v = 0; v < V; ++v)
      acc[v] = _mm256_add_ps(acc[v], _mm256_mul_ps(w, Widen8<kBf16>(row + v * 8)));
  }
  StoreBlock(acc, mean, count, out, col);
}

// out[0, k) = the bag's pooled values for the k = dim - dim % 8 columns it returns.
int32_t PoolHalfAvx2(const void* const* rows, int64_t count, int64_t available,
                     const float* weights, bool mean, int32_t dim, TablePrecision precision,
                     float* out) {
  const bool bf16 = precision == config::TableConfig::BF16;
  return ForEachColumnBlock(dim, [&](auto vectors, int32_t col, bool first) {
    constexpr int V = decltype(vectors)::value;
    (bf16 ? PoolHalfBlock<V, true> : PoolHalfBlock<V, false>)(rows, dim, count, available, weights,
                                                              mean, col, out, first);
  });
}
#undef DLRM_F16C_TARGET
#endif

// Whether the AVX2 + F16C kernels run here (and DLRM_MAX_ISA allows AVX2).
bool UseF16c() { return CpuHasAvx2F16c(); }

}  // namespace

float FloatFromHalf(uint16_t h, TablePrecision precision) {
  return half_bits::Widen(h, precision == config::TableConfig::BF16);
}

uint16_t HalfFromFloat(float x, TablePrecision precision) { return Narrow(x, precision, false, 0); }

uint16_t HalfFromFloatStochastic(float x, uint16_t random, TablePrecision precision) {
  return Narrow(x, precision, true, random);
}

uint16_t RoundingBits(const HalfRounding& rounding, int64_t step, int64_t row, int32_t k) {
  return half_bits::RoundingWord(half_bits::RoundingKey(rounding.seed, rounding.table), step,
                                 rounding.row_begin + row, rounding.col_begin + k);
}

template <typename T>
void DecodeHalfRow(const uint16_t* row, int32_t dim, TablePrecision precision, T* out) {
  DLRM_INTERNAL_CHECK(IsHalf(precision));
  int32_t k0 = 0;
#if defined(__x86_64__)
  if constexpr (std::is_same_v<T, float>)
    if (UseF16c()) k0 = DecodeAvx2(row, dim, precision, out);
#endif
  for (int32_t k = k0; k < dim; ++k) out[k] = static_cast<T>(FloatFromHalf(row[k], precision));
}

template <typename T>
void EncodeHalfRow(const T* values, int32_t dim, TablePrecision precision,
                   const HalfRounding& rounding, int64_t step, int64_t row, uint16_t* out) {
  DLRM_INTERNAL_CHECK(IsHalf(precision));
  int32_t k0 = 0;  // columns [0, k0) narrowed by the AVX2 kernel, a multiple of 8
#if defined(__x86_64__)
  if constexpr (std::is_same_v<T, float>)
    if (UseF16c()) k0 = EncodeAvx2(values, dim, precision, rounding, step, row, out);
#endif
  const bool stochastic = rounding.mode == config::TableConfig::STOCHASTIC;
  for (int32_t b = k0; b < dim; b += kBlock) {
    std::array<uint16_t, kBlock> bits{};
    if (stochastic) bits = RandomBlock(rounding, step, row, b);
    for (int32_t k = b; k < std::min(b + kBlock, dim); ++k)
      out[k] = Narrow(static_cast<float>(values[k]), precision, stochastic,
                      bits[static_cast<size_t>(k - b)]);
  }
}

template <typename T>
void PoolHalfBag(const void* const* rows, int64_t count, int64_t available, const float* weights,
                 bool mean, int32_t dim, TablePrecision precision, T* out) {
  int32_t k0 = 0;  // columns [0, k0) pooled by the AVX2 kernel
#if defined(__x86_64__)
  if constexpr (std::is_same_v<T, float>)
    if (UseF16c()) k0 = PoolHalfAvx2(rows, count, available, weights, mean, dim, precision, out);
#endif
  if (k0 == dim) return;
  std::fill(out + k0, out + dim, T(0));
  for (int64_t j = 0; j < count; ++j) {
    if (k0 == 0 && j + kPrefetchRows < available)
      PrefetchLines(rows[j + kPrefetchRows], static_cast<size_t>(dim) * sizeof(uint16_t));
    const auto* row = static_cast<const uint16_t*>(rows[j]);
    const T w = weights ? static_cast<T>(weights[j]) : T(1);
    for (int32_t k = k0; k < dim; ++k)
      out[k] += w * static_cast<T>(FloatFromHalf(row[k], precision));
  }
  if (mean && count > 0) {
    const auto len = static_cast<T>(count);
    for (int32_t k = k0; k < dim; ++k) out[k] /= len;
  }
}

namespace {

// Arrays in pieces the row kernels take (their dim is an int32_t).
constexpr int64_t kPiece = int64_t{1} << 16;

}  // namespace

void NarrowValues(const float* values, int64_t n, TablePrecision precision, uint16_t* out) {
  const HalfRounding nearest;
  for (int64_t i = 0; i < n; i += kPiece)
    EncodeHalfRow(values + i, static_cast<int32_t>(std::min(kPiece, n - i)), precision, nearest, 0,
                  0, out + i);
}

void WidenValues(const uint16_t* values, int64_t n, TablePrecision precision, float* out) {
  for (int64_t i = 0; i < n; i += kPiece)
    DecodeHalfRow(values + i, static_cast<int32_t>(std::min(kPiece, n - i)), precision, out + i);
}

void RoundToHalf(float* values, int64_t n, TablePrecision precision) {
  std::array<uint16_t, kBlock * 64> narrow;
  const auto piece = static_cast<int64_t>(narrow.size());
  for (int64_t i = 0; i < n; i += piece) {
    const int64_t m = std::min(piece, n - i);
    NarrowValues(values + i, m, precision, narrow.data());
    WidenValues(narrow.data(), m, precision, values + i);
  }
}

#define DLRM_HALF_ROW(T)                                                                          \
  template void DecodeHalfRow<T>(const uint16_t*, int32_t, TablePrecision, T*);                   \
  template void EncodeHalfRow<T>(const T*, int32_t, TablePrecision, const HalfRounding&, int64_t, \
                                 int64_t, uint16_t*);                                             \
  template void PoolHalfBag<T>(const void* const*, int64_t, int64_t, const float*, bool, int32_t, \
                               TablePrecision, T*);
DLRM_HALF_ROW(float)
DLRM_HALF_ROW(double)
#undef DLRM_HALF_ROW

}  // namespace dlrm

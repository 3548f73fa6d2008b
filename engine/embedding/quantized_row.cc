#include "engine/embedding/quantized_row.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "engine/core/cpu_features.h"
#include "engine/core/prefetch.h"
#include "engine/core/status.h"
#include "engine/embedding/column_blocks.h"
#include "engine/embedding/half_bits.h"
#include "engine/embedding/quantized_bits.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace dlrm {
namespace {

using quantized_bits::kScaleBiasBytes;
// How many rows of a bag ahead of the one being added the next is prefetched.
constexpr int64_t kPrefetchRows = 8;

int64_t CodeBytes(TablePrecision precision, int32_t dim) {
  return precision == config::TableConfig::INT4 ? (int64_t{dim} + 1) / 2 : int64_t{dim};
}

float Levels(TablePrecision precision) {
  return precision == config::TableConfig::INT4 ? 15.0f : 255.0f;
}

// A stored row's scale and bias: its last kScaleBiasBytes (row_bytes = StoredRowBytes).
inline void ReadScaleBias(const uint8_t* row, int64_t row_bytes, float* scale, float* bias) {
  quantized_bits::ReadScaleBias(row + row_bytes - kScaleBiasBytes, scale, bias);
}

inline int Code(const uint8_t* row, int32_t k, TablePrecision precision) {
  if (precision == config::TableConfig::INT8) return row[k];
  return (row[k >> 1] >> ((k & 1) * 4)) & 0xF;
}

// acc[k0, dim) += a * code_k, one column at a time (the portable loop, and the AVX2
// kernel's tail).
template <typename T>
void AddScaledCodes(const uint8_t* row, int32_t k0, int32_t dim, TablePrecision precision, T a,
                    T* acc) {
  for (int32_t k = k0; k < dim; ++k) acc[k] += a * static_cast<T>(Code(row, k, precision));
}

#if defined(__x86_64__)
// Codes [k, k + 8) of a row as floats: INT8 one byte each; INT4 two per byte, low nibble
// first (k even: byte k / 2 holds codes k and k + 1).
template <int Bits>
__attribute__((target("avx2"))) inline __m256 CodesAt(const uint8_t* row, int32_t k) {
  if constexpr (Bits == 8) {
    const __m128i bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(row + k));
    return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(bytes));
  } else {
    int32_t four;
    std::memcpy(&four, row + k / 2, sizeof four);
    const __m128i bytes = _mm_cvtsi32_si128(four);
    // Each byte twice, then the low nibble from the first copy, the high from the second.
    const __m256i both = _mm256_cvtepu8_epi32(_mm_unpacklo_epi8(bytes, bytes));
    const __m256i nibbles = _mm256_and_si256(
        _mm256_srlv_epi32(both, _mm256_setr_epi32(0, 4, 0, 4, 0, 4, 0, 4)), _mm256_set1_epi32(0xF));
    return _mm256_cvtepi32_ps(nibbles);
  }
}

// A row's scale and bias widened by F16C (exactly, as half_bits::Fp16Widen does).
__attribute__((target("avx2,f16c"))) inline void ReadScaleBiasF16c(const uint8_t* row,
                                                                   int64_t row_bytes, float* scale,
                                                                   float* bias) {
  uint16_t bits[2];
  std::memcpy(bits, row + row_bytes - kScaleBiasBytes, sizeof bits);
  *scale = _cvtsh_ss(bits[0]);
  *bias = _cvtsh_ss(bits[1]);
}

// AVX2 without FMA: a fused multiply-add would round differently from the portable loop.
// Columns [col, col + V * 8) of an INT8 or INT4 bag, whole: acc = sum_j a_j * code_j in
// registers and the bias term beside it, the rows in order, then acc + bias term (/ count
// for MEAN), stored once: the portable loop's operations. Prefetches only when asked (the
// first block).
template <int V, int Bits>
__attribute__((target("avx2,f16c"))) void PoolCodesBlock(const void* const* rows, int64_t row_bytes,
                                                         int64_t count, int64_t available,
                                                         const float* weights, bool mean,
                                                         int32_t col, float* out, bool prefetch) {
  __m256 acc[V];
  for (int v = 0; v < V; ++v) acc[v] = _mm256_setzero_ps();
  float constant = 0;
  for (int64_t j = 0; j < count; ++j) {
    if (prefetch && j + kPrefetchRows < available)
      PrefetchLines(rows[j + kPrefetchRows], static_cast<size_t>(row_bytes));
    const auto* row = static_cast<const uint8_t*>(rows[j]);
    float scale, bias;
    ReadScaleBiasF16c(row, row_bytes, &scale, &bias);
    const float w = weights ? weights[j] : 1.0f;
    constant += w * bias;
    const __m256 a = _mm256_set1_ps(w * scale);
    for (int v = 0; v < V; ++v)
      acc[v] = _mm256_add_ps(acc[v], _mm256_mul_ps(a, CodesAt<Bits>(row, col + v * 8)));
  }
  const __m256 c = _mm256_set1_ps(constant);
  for (int v = 0; v < V; ++v) acc[v] = _mm256_add_ps(acc[v], c);
  StoreBlock(acc, mean, count, out, col);
}

// out[0, k) = a quantized bag's pooled values for the k = dim - dim % 8 columns it
// returns; the caller finishes the rest with the portable loop.
int32_t PoolCodesAvx2(const void* const* rows, int64_t count, int64_t available,
                      const float* weights, bool mean, int32_t dim, TablePrecision precision,
                      float* out) {
  const int64_t row_bytes = StoredRowBytes(precision, dim);
  const bool int8 = precision == config::TableConfig::INT8;
  return ForEachColumnBlock(dim, [&](auto vectors, int32_t col, bool first) {
    constexpr int V = decltype(vectors)::value;
    (int8 ? PoolCodesBlock<V, 8> : PoolCodesBlock<V, 4>)(rows, row_bytes, count, available, weights,
                                                         mean, col, out, first);
  });
}
#endif

// The fp16 one step below, and one step above, the finite fp16 h (through zero to the
// nearest subnormal of the other sign; saturating at -65504 and 65504).
uint16_t Fp16StepDown(uint16_t h) {
  if ((h & 0x7FFF) == 0) return 0x8001;
  if ((h & 0x8000) == 0) return static_cast<uint16_t>(h - 1);
  return h == (half_bits::kFp16MaxFinite | 0x8000) ? h : static_cast<uint16_t>(h + 1);
}

uint16_t Fp16StepUp(uint16_t h) {
  if ((h & 0x7FFF) == 0) return 0x0001;
  if ((h & 0x8000) != 0) return static_cast<uint16_t>(h - 1);
  return h == half_bits::kFp16MaxFinite ? h : static_cast<uint16_t>(h + 1);
}

// A row's stored bias and scale: each the nearest fp16 unless that would clamp a code (a
// bias above the row's minimum; a scale so short that the maximum's code would pass
// `levels` by half a step or more), then the fp16 next to it the other way. Nearest keeps
// the step as exact as fp16 allows; the other way keeps every value within half a step
// where the range is small against the minimum or the scale is an fp16 subnormal of few
// significant bits.
uint16_t BiasBits(float lo) {
  const uint16_t nearest = half_bits::Fp16Narrow(lo, false, 0);
  return half_bits::Fp16Widen(nearest) <= lo ? nearest : Fp16StepDown(nearest);
}

uint16_t ScaleBits(float span, float levels) {  // span = max - bias >= 0
  const uint16_t nearest = half_bits::Fp16Narrow(span / levels, false, 0);
  const bool clamps = span > 0 && !(half_bits::Fp16Widen(nearest) * (levels + 0.5f) > span);
  return clamps ? Fp16StepUp(nearest) : nearest;
}

}  // namespace

const char* PrecisionName(TablePrecision precision) {
  return config::TableConfig::Precision_Name(precision).c_str();
}

int64_t StoredRowBytes(TablePrecision precision, int32_t dim) {
  if (IsQuantized(precision)) return CodeBytes(precision, dim) + kScaleBiasBytes;
  return int64_t{dim} * ValueBytes(precision);
}

template <typename T>
bool QuantizedRangeHolds(const T* row, int32_t dim) {
  for (int32_t k = 0; k < dim; ++k)
    if (!(std::abs(static_cast<float>(row[k])) <= quantized_bits::kMaxMagnitude)) return false;
  return true;
}

template <typename T>
void QuantizeRow(const T* row, int32_t dim, TablePrecision precision, uint8_t* out) {
  DLRM_INTERNAL_CHECK(IsQuantized(precision) && dim > 0);
  float lo = static_cast<float>(row[0]), hi = lo;
  for (int32_t k = 1; k < dim; ++k) {
    lo = std::min(lo, static_cast<float>(row[k]));
    hi = std::max(hi, static_cast<float>(row[k]));
  }
  // The codes are formed against the stored (fp16) bias and scale, so that they stand for
  // the row as it will be read.
  const float levels = Levels(precision);
  const uint16_t bias_bits = BiasBits(lo);
  const float bias = half_bits::Fp16Widen(bias_bits);
  const uint16_t scale_bits = ScaleBits(hi - bias, levels);
  const float scale = half_bits::Fp16Widen(scale_bits);
  std::memset(out, 0, static_cast<size_t>(CodeBytes(precision, dim)));
  for (int32_t k = 0; scale > 0 && k < dim; ++k) {
    const float q = std::floor((static_cast<float>(row[k]) - bias) / scale + 0.5f);
    const auto code = static_cast<uint8_t>(std::clamp(q, 0.0f, levels));
    if (precision == config::TableConfig::INT8)
      out[k] = code;
    else
      out[k >> 1] = static_cast<uint8_t>(out[k >> 1] | (code << ((k & 1) * 4)));
  }
  quantized_bits::WriteScaleBias(scale_bits, bias_bits, out + CodeBytes(precision, dim));
}

template <typename T>
void DequantizeRow(const uint8_t* row, int32_t dim, TablePrecision precision, T* out) {
  float scale, bias;
  ReadScaleBias(row, StoredRowBytes(precision, dim), &scale, &bias);
  for (int32_t k = 0; k < dim; ++k)
    out[k] = static_cast<T>(scale * static_cast<float>(Code(row, k, precision)) + bias);
}

bool QuantizedRowIsValid(const uint8_t* row, int32_t dim, TablePrecision precision) {
  float scale, bias;
  ReadScaleBias(row, StoredRowBytes(precision, dim), &scale, &bias);
  return std::isfinite(scale) && std::isfinite(bias) && scale >= 0;
}

template <typename T>
void PoolQuantizedBag(const void* const* rows, int64_t count, int64_t available,
                      const float* weights, bool mean, int32_t dim, TablePrecision precision,
                      T* out) {
  int32_t k0 = 0;  // columns [0, k0) pooled by the AVX2 kernel
#if defined(__x86_64__)
  if constexpr (std::is_same_v<T, float>)
    if (CpuHasAvx2F16c())
      k0 = PoolCodesAvx2(rows, count, available, weights, mean, dim, precision, out);
#endif
  if (k0 == dim) return;
  std::fill(out + k0, out + dim, T(0));
  const int64_t row_bytes = StoredRowBytes(precision, dim);
  T constant = 0;
  for (int64_t j = 0; j < count; ++j) {
    if (k0 == 0 && j + kPrefetchRows < available)
      PrefetchLines(rows[j + kPrefetchRows], static_cast<size_t>(row_bytes));
    const auto* row = static_cast<const uint8_t*>(rows[j]);
    float scale, bias;
    ReadScaleBias(row, row_bytes, &scale, &bias);
    const T w = weights ? static_cast<T>(weights[j]) : T(1);
    constant += w * static_cast<T>(bias);
    AddScaledCodes(row, k0, dim, precision, w * static_cast<T>(scale), out);
  }
  for (int32_t k = k0; k < dim; ++k) out[k] += constant;
  if (mean && count > 0) {
    const auto len = static_cast<T>(count);
    for (int32_t k = k0; k < dim; ++k) out[k] /= len;
  }
}

#define DLRM_QUANTIZED_ROW(T)                                                                 \
  template bool QuantizedRangeHolds<T>(const T*, int32_t);                                    \
  template void QuantizeRow<T>(const T*, int32_t, TablePrecision, uint8_t*);                  \
  template void DequantizeRow<T>(const uint8_t*, int32_t, TablePrecision, T*);                \
  template void PoolQuantizedBag<T>(const void* const*, int64_t, int64_t, const float*, bool, \
                                    int32_t, TablePrecision, T*);
DLRM_QUANTIZED_ROW(float)
DLRM_QUANTIZED_ROW(double)
#undef DLRM_QUANTIZED_ROW

}  // namespace dlrm

// Row-wise quantized embedding rows (TableConfig.precision INT8 / INT4): the serving
// format `dlrm export --quantize` writes and the predict path pools from directly.
//
// Layout of one row of dim values: the codes (INT8: dim bytes; INT4: ceil(dim / 2) bytes,
// value 2k in the low nibble of byte k, 2k + 1 in the high one), then the row's scale and
// bias as fp16 (quantized_bits.h; 4 bytes, as FBGEMM's table-batched inference rows).
// Value k is scale * code_k + bias, where bias is the row's minimum and scale
// (max - bias) / 255 (INT8) or / 15 (INT4), each the nearest fp16 unless that would clamp
// a code (then rounded the other way), and code_k is formed against those values. A row of 16
// values is 20 bytes in INT8 (0.31 of FP32), 12 in INT4; at dim 128, 132 and 68.
//
// Determinism: every function is a pure function of its arguments; the AVX2 pooling
// kernel adds in the portable loop's order without fused multiply-adds, so both give the
// same bits on any machine.
// Threading: none; rows are plain memory the caller partitions.
// Errors: none thrown; callers pass a quantized precision and rows of StoredRowBytes.
#pragma once

#include <cstdint>

#include "engine/config/config.h"  // IsQuantized, IsHalf
#include "engine/config/dlrm.pb.h"

namespace dlrm {

using TablePrecision = config::TableConfig::Precision;

// The name the config uses ("INT8").
const char* PrecisionName(TablePrecision precision);
// Bytes of one stored row: dim * 4 for FP32, dim * 2 for BF16 / FP16 (half_row.h), the
// layout above for INT8 / INT4.
int64_t StoredRowBytes(TablePrecision precision, int32_t dim);

// Whether every value of row[0, dim) is finite and within +-65504, the range of the fp16
// scale and bias: what QuantizeRow needs of a row (beyond it they would saturate).
template <typename T>
bool QuantizedRangeHolds(const T* row, int32_t dim);
// out[0, StoredRowBytes) = row[0, dim) quantized; row must be finite. A value beyond
// +-65504 saturates the scale or bias (QuantizedRangeHolds says whether a row fits; Export
// refuses a row that does not).
template <typename T>
void QuantizeRow(const T* row, int32_t dim, TablePrecision precision, uint8_t* out);
// out[0, dim) = the values a quantized row stands for.
template <typename T>
void DequantizeRow(const uint8_t* row, int32_t dim, TablePrecision precision, T* out);
// Whether a stored row's scale and bias are finite and its scale >= 0 (what QuantizeRow
// writes); a damaged file's row is refused before it is used.
bool QuantizedRowIsValid(const uint8_t* row, int32_t dim, TablePrecision precision);

// out[0, dim) = the bag of quantized rows rows[0, count) (each StoredRowBytes bytes): the
// sum over j of w_j * value(rows[j]) (w_j = 1 without weights), divided by count if mean
// and count > 0. The sum is formed as
//   acc_k = sum_j (w_j * scale_j) * code_jk, then acc_k + sum_j (w_j * bias_j),
// row by row from zero, multiplications and additions rounded separately. While adding
// row j it prefetches rows[j + 8] when that index is below `available` (the rows the
// same pass reads next, of any table).
template <typename T>
void PoolQuantizedBag(const void* const* rows, int64_t count, int64_t available,
                      const float* weights, bool mean, int32_t dim, TablePrecision precision,
                      T* out);

}  // namespace dlrm

// BF16 / FP16 embedding rows (TableConfig.precision BF16, FP16): trainable tables whose
// values are held in 16 bits and computed with in fp32. The pooled forward widens each
// row as it adds it; an update widens the row, applies the optimizer in fp32 and stores
// the result rounded (TableConfig.rounding): to nearest, or stochastically with random
// bits that are a pure function of (seed, step, table, row, column).
//
// Formats: BF16 is the top half of an fp32 (8 exponent bits, 7 mantissa bits); FP16 is
// IEEE binary16 (5 and 10, largest finite 65504). Widening is exact. Narrowing keeps
// NaN a (quiet) NaN and infinities infinite, and stores a finite value beyond the
// format's largest finite one as that value (saturating), so a finite fp32 update never
// leaves an infinity in a row.
//
// Determinism: every function is a pure function of its arguments; the AVX2 / F16C
// kernels give the portable loops' bits (the pooling adds in the same order, without
// fused multiply-adds), tested over every 16-bit pattern and random fp32 ones.
// Threading: none; rows are plain memory the caller partitions.
// Errors: none thrown; callers pass a 16-bit precision (IsHalf) and rows of dim values.
#pragma once

#include <cstdint>

#include "engine/config/dlrm.pb.h"
#include "engine/embedding/quantized_row.h"

namespace dlrm {

using TableRounding = config::TableConfig::Rounding;

// One value, exactly widened / narrowed to nearest (ties to even) as above.
float FloatFromHalf(uint16_t h, TablePrecision precision);
uint16_t HalfFromFloat(float x, TablePrecision precision);
// x narrowed stochastically: the bits of x's magnitude below the format's precision,
// read as a fraction f of one unit in the last place (the top 16 of them when more are
// dropped), round it away from zero when f + random / 2^16 >= 1: with probability f, up
// to the 16 bits' resolution. Saturates, and keeps NaN and infinities, as HalfFromFloat.
uint16_t HalfFromFloatStochastic(float x, uint16_t random, TablePrecision precision);

// How a table's updated rows are narrowed: the mode, and the table's key for the
// stochastic mode's random bits (the engine's seed and the table's index). A shard of a
// table (an embedding server's piece) also says where its rows and columns sit in the
// whole table, so that its row r, column k draws the bits of row row_begin + r, column
// col_begin + k: a sharded table rounds bitwise as the one process's.
struct HalfRounding {
  TableRounding mode = config::TableConfig::NEAREST;
  uint64_t seed = 0;
  int32_t table = 0;
  int64_t row_begin = 0;
  int32_t col_begin = 0;
};

// The 16 random bits column k of `row` gets at `step` under rounding's key: word K of the
// Philox stream keyed by (seed, table), counter (step, R, K / 8), for the whole table's row
// R = row_begin + row and column K = col_begin + k. Its dim < 2^19, rows < 2^47.
uint16_t RoundingBits(const HalfRounding& rounding, int64_t step, int64_t row, int32_t k);

// out[0, dim) = row[0, dim) widened.
template <typename T>
void DecodeHalfRow(const uint16_t* row, int32_t dim, TablePrecision precision, T* out);
// out[0, dim) = values[0, dim) narrowed as rounding says (its random bits those of
// (step, row)).
template <typename T>
void EncodeHalfRow(const T* values, int32_t dim, TablePrecision precision,
                   const HalfRounding& rounding, int64_t step, int64_t row, uint16_t* out);

// Arrays of any length (compressed communication, DistributedConfig.wire_precision):
// values narrowed to nearest into out, widened back, or rounded in place (each value
// replaced by its narrowed value widened: what a 16-bit wire delivers).
void NarrowValues(const float* values, int64_t n, TablePrecision precision, uint16_t* out);
void WidenValues(const uint16_t* values, int64_t n, TablePrecision precision, float* out);
void RoundToHalf(float* values, int64_t n, TablePrecision precision);

// out[0, dim) = the bag of 16-bit rows rows[0, count) (dim values each): the sum over j of
// w_j * value(rows[j]) (w_j = 1 without weights), row by row from zero, each product and
// sum rounded to T, divided by count if mean and count > 0. While adding row j it
// prefetches rows[j + 8] when that index is below `available` (the rows the same pass
// reads next, of any table).
template <typename T>
void PoolHalfBag(const void* const* rows, int64_t count, int64_t available, const float* weights,
                 bool mean, int32_t dim, TablePrecision precision, T* out);

}  // namespace dlrm

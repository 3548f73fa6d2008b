// BF16 / FP16 rows (issue 16): widening is exact, narrowing rounds to nearest even or
// stochastically, saturates finite values past the format's range and keeps NaN and
// infinities; the AVX2 / F16C kernels give the portable loops' bits; stochastic rounding
// is unbiased and a pure function of (seed, step, table, row, column).
#include "engine/embedding/half_row.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <limits>
#include <vector>

#include "engine/core/philox.h"

namespace dlrm {
namespace {

constexpr TablePrecision kBf16 = config::TableConfig::BF16;
constexpr TablePrecision kFp16 = config::TableConfig::FP16;

float FromBits(uint32_t u) {
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

uint32_t Bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}

// Every 16-bit pattern, 8 at a time through the row kernels (which take the AVX2 path for
// whole blocks of 8 where the CPU has it), against the one-value functions.
TEST(HalfRow, RowWideningIsTheOneValueWideningForEveryPattern) {
  for (TablePrecision p : {kBf16, kFp16}) {
    std::vector<uint16_t> all(65536);
    for (uint32_t h = 0; h < 65536; ++h) all[h] = static_cast<uint16_t>(h);
    std::vector<float> wide(all.size());
    DecodeHalfRow(all.data(), static_cast<int32_t>(all.size()), p, wide.data());
    for (uint32_t h = 0; h < 65536; ++h)
      ASSERT_EQ(Bits(wide[h]), Bits(FloatFromHalf(static_cast<uint16_t>(h), p)))
          << config::TableConfig::Precision_Name(p) << " pattern " << h;
  }
}

TEST(HalfRow, WideningIsExactAndNarrowingGivesEveryValueBack) {
  EXPECT_EQ(FloatFromHalf(0x3F80, kBf16), 1.0f);
  EXPECT_EQ(FloatFromHalf(0x3C00, kFp16), 1.0f);
  EXPECT_EQ(FloatFromHalf(0x7BFF, kFp16), 65504.0f);
  EXPECT_EQ(FloatFromHalf(0x0001, kFp16), std::ldexp(1.0f, -24));
  EXPECT_EQ(FloatFromHalf(0x8001, kFp16), -std::ldexp(1.0f, -24));
  for (TablePrecision p : {kBf16, kFp16})
    for (uint32_t h = 0; h < 65536; ++h) {
      const float x = FloatFromHalf(static_cast<uint16_t>(h), p);
      if (std::isnan(x)) continue;
      ASSERT_EQ(HalfFromFloat(x, p), h) << config::TableConfig::Precision_Name(p) << " " << h;
      ASSERT_EQ(HalfFromFloatStochastic(x, 0xFFFF, p), h) << "an exact value never moves";
    }
}

TEST(HalfRow, NarrowingToNearestTiesToEvenAndSaturatesFiniteValues) {
  // BF16 keeps 8 significant bits: 1 + 2^-8 is halfway between 1 and 1 + 2^-7.
  EXPECT_EQ(HalfFromFloat(1.0f + std::ldexp(1.0f, -8), kBf16), 0x3F80);
  EXPECT_EQ(HalfFromFloat(1.0f + 3 * std::ldexp(1.0f, -8), kBf16), 0x3F82);  // tie, up to even
  EXPECT_EQ(HalfFromFloat(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20), kBf16), 0x3F81);
  EXPECT_EQ(HalfFromFloat(std::numeric_limits<float>::max(), kBf16), 0x7F7F);
  EXPECT_EQ(HalfFromFloat(-std::numeric_limits<float>::max(), kBf16), 0xFF7F);
  EXPECT_EQ(HalfFromFloat(65519.0f, kFp16), 0x7BFF);
  EXPECT_EQ(HalfFromFloat(65520.0f, kFp16), 0x7BFF) << "IEEE gives infinity; held at the largest";
  EXPECT_EQ(HalfFromFloat(1e9f, kFp16), 0x7BFF);
  EXPECT_EQ(HalfFromFloat(-1e9f, kFp16), 0xFBFF);
  EXPECT_EQ(HalfFromFloat(std::ldexp(1.0f, -25), kFp16), 0x0000) << "tie to even: zero";
  EXPECT_EQ(HalfFromFloat(std::ldexp(1.5f, -25), kFp16), 0x0001);
  EXPECT_EQ(HalfFromFloat(std::ldexp(3.0f, -25), kFp16), 0x0002) << "tie to even: 2";
  EXPECT_EQ(HalfFromFloat(std::ldexp(1.0f, -14) * (1 + std::ldexp(1.0f, -11)), kFp16), 0x0400);
  for (TablePrecision p : {kBf16, kFp16}) {
    const float inf = std::numeric_limits<float>::infinity();
    EXPECT_TRUE(std::isinf(FloatFromHalf(HalfFromFloat(inf, p), p)));
    EXPECT_LT(FloatFromHalf(HalfFromFloat(-inf, p), p), 0);
    EXPECT_TRUE(std::isnan(FloatFromHalf(HalfFromFloat(std::nanf(""), p), p)));
    EXPECT_TRUE(std::isnan(FloatFromHalf(HalfFromFloatStochastic(std::nanf(""), 7, p), p)));
  }
}

// Random fp32 bit patterns (NaNs, infinities, subnormals and all) through the row encoder,
// in rows of 8 * k + 5 so that both the vector blocks and the tail run.
TEST(HalfRow, RowNarrowingIsTheOneValueNarrowingForRandomPatterns) {
  constexpr int32_t kDim = 45;
  for (TablePrecision p : {kBf16, kFp16}) {
    for (auto mode : {config::TableConfig::NEAREST, config::TableConfig::STOCHASTIC}) {
      const HalfRounding rounding{mode, 17, 3};
      for (int64_t row = 0; row < 4000; ++row) {
        std::vector<float> values(kDim);
        for (int32_t k = 0; k < kDim; ++k) {
          const auto words = Philox4x32(5, static_cast<uint64_t>(row), static_cast<uint64_t>(k));
          // Half the values random patterns, half near 1 (where rounding is busiest).
          values[k] =
              k % 2 == 0 ? FromBits(words[0]) : 1.0f + static_cast<float>(words[1] >> 8) * 0x1p-24f;
        }
        std::vector<uint16_t> out(kDim);
        EncodeHalfRow(values.data(), kDim, p, rounding, 9, row, out.data());
        for (int32_t k = 0; k < kDim; ++k) {
          const uint16_t want =
              mode == config::TableConfig::NEAREST
                  ? HalfFromFloat(values[k], p)
                  : HalfFromFloatStochastic(values[k], RoundingBits(rounding, 9, row, k), p);
          ASSERT_EQ(out[k], want) << config::TableConfig::Precision_Name(p) << " row " << row
                                  << " column " << k << " value bits " << Bits(values[k]);
        }
      }
    }
  }
}

// Rows whose blocks of 16 are all finite values far from infinity take the BF16 encoder's
// short path (no saturation or NaN checks): random finite patterns of every magnitude and
// sign, each row with one value at or past the short path's bound (the largest floats,
// which round to BF16's largest, not to infinity; infinities; NaNs) in a block of its own
// position, so that every block takes both paths across the rows.
TEST(HalfRow, Bf16BlocksOfFiniteValuesEncodeAsTheOneValueNarrowing) {
  constexpr int32_t kDim = 61;  // three blocks of 16, one of 8, a tail of 5
  const uint32_t edges[] = {0x7F7F0000u, 0x7F7F0001u, 0x7F7F7FFFu, 0x7F7F8000u, 0x7F7FFFFFu,
                            0xFF7F8000u, 0x7F800000u, 0xFF800000u, 0x7FC00000u, 0x7F800001u};
  for (int64_t row = 0; row < 3000; ++row) {
    std::vector<float> values(kDim);
    for (int32_t k = 0; k < kDim; ++k) {
      const auto words = Philox4x32(11, static_cast<uint64_t>(row), static_cast<uint64_t>(k));
      // Exponent field 0 to 254 (every finite float), any sign and mantissa; a zero of
      // either sign now and then.
      const uint32_t exponent = words[0] % 255;
      values[k] = words[2] % 16 == 0 ? FromBits(words[1] & 0x80000000u)
                                     : FromBits((words[1] & 0x807FFFFFu) | exponent << 23);
    }
    if (row % 2 == 1) {
      const uint32_t edge = edges[static_cast<size_t>(row / 2) % std::size(edges)];
      values[static_cast<size_t>(row / 2) % kDim] = FromBits(edge);
    }
    std::vector<uint16_t> out(kDim);
    EncodeHalfRow(values.data(), kDim, kBf16, HalfRounding{}, 1, row, out.data());
    for (int32_t k = 0; k < kDim; ++k)
      ASSERT_EQ(out[k], HalfFromFloat(values[k], kBf16))
          << "row " << row << " column " << k << " value bits " << Bits(values[k]);
  }
}

// 1 + 2^-10 lies 1/8 of the way from 1 to BF16's next value (1 + 2^-7): stochastically it
// rounds up in about 1/8 of the (row, step) draws, so the mean stays x; to nearest it
// is always 1 (the update is lost).
TEST(HalfRow, StochasticRoundingIsUnbiasedAndAPureFunctionOfItsKey) {
  const float x = 1.0f + std::ldexp(1.0f, -10);
  const HalfRounding rounding{config::TableConfig::STOCHASTIC, 11, 2};
  int64_t up = 0, n = 0;
  for (int64_t step = 1; step <= 50; ++step)
    for (int64_t row = 0; row < 400; ++row, ++n)
      up += FloatFromHalf(HalfFromFloatStochastic(x, RoundingBits(rounding, step, row, 5), kBf16),
                          kBf16) > 1.0f;
  EXPECT_NEAR(static_cast<double>(up) / static_cast<double>(n), 0.125, 0.01);
  EXPECT_EQ(HalfFromFloat(x, kBf16), 0x3F80);
  // Same key, same bits; each part of the key changes them.
  const uint16_t bits = RoundingBits(rounding, 3, 8, 5);
  EXPECT_EQ(RoundingBits(rounding, 3, 8, 5), bits);
  int changed = 0;
  changed += RoundingBits(rounding, 4, 8, 5) != bits;
  changed += RoundingBits(rounding, 3, 9, 5) != bits;
  changed += RoundingBits(rounding, 3, 8, 6) != bits;
  changed += RoundingBits({config::TableConfig::STOCHASTIC, 12, 2}, 3, 8, 5) != bits;
  changed += RoundingBits({config::TableConfig::STOCHASTIC, 11, 3}, 3, 8, 5) != bits;
  EXPECT_EQ(changed, 5);
}

// A shard of rows [row_begin, ...) x columns [col_begin, ...) of a table rounds its row r,
// column k with the whole table's bits for (row_begin + r, col_begin + k), at every
// column offset (those inside a block of 8 columns straddle two Philox calls), in both
// the vector kernel's blocks and the tail.
TEST(HalfRow, AShardRoundsWithTheWholeTablesBits) {
  constexpr int32_t kWholeDim = 45;
  const HalfRounding whole{config::TableConfig::STOCHASTIC, 17, 3};
  std::vector<float> values(kWholeDim);
  for (int32_t k = 0; k < kWholeDim; ++k)
    values[k] =
        1.0f + static_cast<float>(Philox4x32(6, 0, static_cast<uint64_t>(k))[0] >> 8) * 0x1p-24f;
  for (TablePrecision p : {kBf16, kFp16}) {
    for (const int64_t row : {int64_t{0}, int64_t{7}, int64_t{1} << 40}) {
      std::vector<uint16_t> want(kWholeDim);
      EncodeHalfRow(values.data(), kWholeDim, p, whole, 9, row, want.data());
      for (int32_t col_begin = 0; col_begin < 17; ++col_begin) {
        const int64_t row_begin = row / 2;
        HalfRounding shard = whole;
        shard.row_begin = row_begin;
        shard.col_begin = col_begin;
        const int32_t dim = kWholeDim - col_begin;
        std::vector<uint16_t> got(static_cast<size_t>(dim));
        EncodeHalfRow(values.data() + col_begin, dim, p, shard, 9, row - row_begin, got.data());
        for (int32_t k = 0; k < dim; ++k) {
          ASSERT_EQ(got[k], want[col_begin + k])
              << config::TableConfig::Precision_Name(p) << " row " << row << " col_begin "
              << col_begin << " column " << k;
          ASSERT_EQ(RoundingBits(shard, 9, row - row_begin, k),
                    RoundingBits(whole, 9, row, col_begin + k));
        }
      }
    }
  }
}

TEST(HalfRow, StochasticFp16SubnormalsRoundUpByTheirFraction) {
  // 2^-26 is a quarter of FP16's smallest subnormal: up (to 2^-24) a quarter of the time.
  const float x = std::ldexp(1.0f, -26);
  int up = 0;
  for (uint32_t r = 0; r < 65536; ++r)
    up += HalfFromFloatStochastic(x, static_cast<uint16_t>(r), kFp16) == 0x0001;
  EXPECT_EQ(up, 16384);
}

// A bag pooled by the kernel against the sum written out: w * widened value, added in
// order from zero (no fused multiply-add), / count for MEAN.
TEST(HalfRow, PooledBagIsTheOrderedSumOfWidenedRows) {
  for (TablePrecision p : {kBf16, kFp16}) {
    for (int32_t dim : {4, 16, 20, 72}) {
      constexpr int64_t kRows = 30;
      std::vector<uint16_t> table(static_cast<size_t>(kRows * dim));
      for (size_t i = 0; i < table.size(); ++i)
        table[i] = HalfFromFloat(static_cast<float>(std::sin(0.37 * static_cast<double>(i))), p);
      const std::vector<int64_t> ids = {3, 29, 3, 0, 17, 8, 8, 21, 5, 11, 2};
      std::vector<float> weights(ids.size());
      for (size_t j = 0; j < ids.size(); ++j) weights[j] = 0.25f + 0.1f * static_cast<float>(j);
      for (bool mean : {false, true}) {
        for (const float* w :
             {static_cast<const float*>(nullptr), static_cast<const float*>(weights.data())}) {
          const auto count = static_cast<int64_t>(ids.size());
          std::vector<float> got(static_cast<size_t>(dim));
          std::vector<const void*> rows;
          for (const int64_t id : ids) rows.push_back(table.data() + id * dim);
          PoolHalfBag(rows.data(), count, count, w, mean, dim, p, got.data());
          for (int32_t k = 0; k < dim; ++k) {
            float want = 0;
            for (int64_t j = 0; j < count; ++j) {
              const float product = (w ? w[j] : 1.0f) *
                                    FloatFromHalf(table[static_cast<size_t>(ids[j] * dim + k)], p);
              want += product;
            }
            if (mean) want /= static_cast<float>(count);
            ASSERT_EQ(Bits(got[k]), Bits(want)) << "dim " << dim << " column " << k;
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace dlrm

// Row-wise quantized rows (engine/embedding/quantized_row.h): the layout's sizes, the
// round trip's error bound, damaged rows, and the pooled bag: the AVX2 kernel gives the
// documented sum's bits (written out here as plain loops), with weights, MEAN and dims
// that leave a tail.
#include "engine/embedding/quantized_row.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "engine/embedding/embedding_table.h"
#include "engine/embedding/half_bits.h"

namespace dlrm {
namespace {

constexpr auto kInt8 = config::TableConfig::INT8;
constexpr auto kInt4 = config::TableConfig::INT4;

std::vector<float> RandomRow(int32_t dim, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> value(-0.7f, 0.4f);
  std::vector<float> row(static_cast<size_t>(dim));
  for (float& v : row) v = value(rng);
  return row;
}

// A stored row's scale and bias, widened from their fp16 bits after the codes.
void ScaleAndBias(const uint8_t* row, int64_t row_bytes, float* scale, float* bias) {
  uint16_t bits[2];
  std::memcpy(bits, row + row_bytes - 4, sizeof bits);
  *scale = half_bits::Fp16Widen(bits[0]);
  *bias = half_bits::Fp16Widen(bits[1]);
}

TEST(QuantizedRow, RowBytesAreCodesThenAnFp16ScaleAndBias) {
  EXPECT_EQ(StoredRowBytes(config::TableConfig::FP32, 16), 64);
  EXPECT_EQ(StoredRowBytes(kInt8, 16), 16 + 4);
  EXPECT_EQ(StoredRowBytes(kInt4, 16), 8 + 4);
  EXPECT_EQ(StoredRowBytes(kInt4, 15), 8 + 4);  // the last byte's high nibble unused
  EXPECT_EQ(StoredRowBytes(kInt8, 128), 132);   // MLPerf's dim: 0.26 of fp32
  EXPECT_FALSE(IsQuantized(config::TableConfig::FP32));
  EXPECT_TRUE(IsQuantized(kInt8) && IsQuantized(kInt4));
  EXPECT_STREQ(PrecisionName(kInt4), "INT4");
}

// Every value of `row` quantized and read back lies within half a step of its own: the
// step of the stored (fp16) scale, which is rounded up from (max - bias) / levels with the
// bias rounded down from the minimum, so at most an fp16 ulp of the minimum (2^-10
// relative, 2^-24 below the normal range) widens the range and an ulp of the scale the step.
void ExpectWithinHalfAStep(const std::vector<float>& row, TablePrecision precision) {
  const auto dim = static_cast<int32_t>(row.size());
  const float levels = precision == kInt8 ? 255.0f : 15.0f;
  std::vector<uint8_t> codes(static_cast<size_t>(StoredRowBytes(precision, dim)));
  QuantizeRow(row.data(), dim, precision, codes.data());
  EXPECT_TRUE(QuantizedRowIsValid(codes.data(), dim, precision));
  std::vector<float> back(static_cast<size_t>(dim));
  DequantizeRow(codes.data(), dim, precision, back.data());
  float lo = row[0], hi = row[0];
  for (const float v : row) lo = std::min(lo, v), hi = std::max(hi, v);
  const float range = hi - lo + std::max(std::abs(lo) * 0x1p-10f, 0x1p-24f);
  const float half_step = (range / levels * (1 + 0x1p-10f) + 0x1p-24f) / 2;
  for (int32_t k = 0; k < dim; ++k)
    EXPECT_NEAR(back[k], row[k], half_step * 1.0001f)
        << PrecisionName(precision) << " dim " << dim << " k " << k << " lo " << lo;
}

TEST(QuantizedRow, EveryValueComesBackWithinHalfAStep) {
  for (const auto precision : {kInt8, kInt4}) {
    for (const int32_t dim : {1, 7, 16, 33, 128})
      ExpectWithinHalfAStep(RandomRow(dim, static_cast<uint32_t>(dim)), precision);
    // Rows far from zero (the bias's fp16 ulp larger than a step) and rows of a small
    // range (a subnormal scale, as tables still at a small initializer's values have).
    for (const float offset : {1000.0f, -3.5f, 0.02f})
      for (const float spread : {1.0f, 1e-3f, 1e-5f, 0.0f}) {
        std::vector<float> row = RandomRow(16, 7);
        for (float& v : row) v = offset + spread * v;
        ExpectWithinHalfAStep(row, precision);
      }
  }
}

TEST(QuantizedRow, AConstantRowIsExact) {
  const std::vector<float> row(16, -0.25f);
  std::vector<uint8_t> codes(static_cast<size_t>(StoredRowBytes(kInt8, 16)));
  QuantizeRow(row.data(), 16, kInt8, codes.data());
  std::vector<float> back(16);
  DequantizeRow(codes.data(), 16, kInt8, back.data());
  EXPECT_EQ(back, row);
}

TEST(QuantizedRow, ARowWithANonFiniteOrNegativeScaleIsInvalid) {
  const std::vector<float> row = RandomRow(16, 3);
  std::vector<uint8_t> codes(static_cast<size_t>(StoredRowBytes(kInt8, 16)));
  QuantizeRow(row.data(), 16, kInt8, codes.data());
  EXPECT_TRUE(QuantizedRowIsValid(codes.data(), 16, kInt8));
  // fp16 NaN, infinity, -1
  for (const uint16_t bad : {uint16_t{0x7E00}, uint16_t{0x7C00}, uint16_t{0xBC00}}) {
    std::vector<uint8_t> damaged = codes;
    std::memcpy(damaged.data() + 16, &bad, sizeof bad);  // the scale
    EXPECT_FALSE(QuantizedRowIsValid(damaged.data(), 16, kInt8)) << bad;
  }
  for (const uint16_t bad : {uint16_t{0x7E00}, uint16_t{0xFC00}}) {
    std::vector<uint8_t> damaged = codes;
    std::memcpy(damaged.data() + 18, &bad, sizeof bad);  // the bias
    EXPECT_FALSE(QuantizedRowIsValid(damaged.data(), 16, kInt8)) << bad;
  }
}

TEST(QuantizedRow, OnlyRowsWithinTheFp16RangeCanBeQuantized) {
  std::vector<float> row = RandomRow(16, 4);
  EXPECT_TRUE(QuantizedRangeHolds(row.data(), 16));
  row[3] = 65504.0f;
  row[9] = -65504.0f;
  EXPECT_TRUE(QuantizedRangeHolds(row.data(), 16));
  std::vector<uint8_t> codes(static_cast<size_t>(StoredRowBytes(kInt8, 16)));
  QuantizeRow(row.data(), 16, kInt8, codes.data());
  std::vector<float> back(16);
  DequantizeRow(codes.data(), 16, kInt8, back.data());
  EXPECT_EQ(back[9], -65504.0f);
  EXPECT_NEAR(back[3], 65504.0f, 2 * 65504.0f / 255);
  for (const float bad : {65520.0f, -1e6f, std::numeric_limits<float>::infinity(),
                          std::numeric_limits<float>::quiet_NaN()}) {
    row[5] = bad;
    EXPECT_FALSE(QuantizedRangeHolds(row.data(), 16)) << bad;
  }
}

// A table of `rows` random quantized rows, and a bag over them with repeats.
struct Fixture {
  Fixture(TablePrecision p, int32_t d) : precision(p), dim(d), row_bytes(StoredRowBytes(p, d)) {
    table.resize(static_cast<size_t>(kRows * row_bytes));
    for (int64_t r = 0; r < kRows; ++r)
      QuantizeRow(RandomRow(dim, static_cast<uint32_t>(r + 100)).data(), dim, precision,
                  table.data() + r * row_bytes);
  }
  // The sum quantized_row.h documents, as plain loops.
  std::vector<float> Expected(const std::vector<int64_t>& ids, const float* weights,
                              bool mean) const {
    std::vector<float> acc(static_cast<size_t>(dim), 0.0f), values(static_cast<size_t>(dim));
    float constant = 0;
    for (size_t j = 0; j < ids.size(); ++j) {
      const uint8_t* row = table.data() + ids[j] * row_bytes;
      float scale, bias;
      ScaleAndBias(row, row_bytes, &scale, &bias);
      const float w = weights ? weights[j] : 1.0f;
      const float a = w * scale;
      constant += w * bias;
      for (int32_t k = 0; k < dim; ++k) {
        const int code = precision == kInt8 ? row[k] : (row[k / 2] >> ((k % 2) * 4)) & 0xF;
        acc[k] += a * static_cast<float>(code);
      }
    }
    for (float& v : acc) v += constant;
    if (mean && !ids.empty())
      for (float& v : acc) v /= static_cast<float>(ids.size());
    return acc;
  }
  // The addresses of rows ids, as the pooled forward lists them.
  std::vector<const void*> Rows(const std::vector<int64_t>& ids) const {
    std::vector<const void*> rows;
    for (const int64_t id : ids) rows.push_back(table.data() + id * row_bytes);
    return rows;
  }
  static constexpr int64_t kRows = 50;
  TablePrecision precision;
  int32_t dim;
  int64_t row_bytes;
  std::vector<uint8_t> table;
};

TEST(QuantizedRow, PooledBagsHaveTheDocumentedSumsBits) {
  const std::vector<int64_t> ids = {3, 17, 3, 49, 0, 22, 8, 8, 31, 12, 40, 5};
  std::vector<float> weights(ids.size());
  for (size_t j = 0; j < weights.size(); ++j) weights[j] = 0.25f * static_cast<float>(j) - 1.1f;
  for (const auto precision : {kInt8, kInt4}) {
    for (const int32_t dim : {16, 13, 64, 3}) {
      const Fixture f(precision, dim);
      for (const bool weighted : {false, true}) {
        for (const bool mean : {false, true}) {
          const float* w = weighted ? weights.data() : nullptr;
          std::vector<float> out(static_cast<size_t>(dim), 99.0f);
          PoolQuantizedBag(f.Rows(ids).data(), static_cast<int64_t>(ids.size()),
                           static_cast<int64_t>(ids.size()), w, mean, dim, precision, out.data());
          EXPECT_EQ(out, f.Expected(ids, w, mean)) << PrecisionName(precision) << " dim " << dim
                                                   << " weighted " << weighted << " mean " << mean;
        }
      }
      std::vector<float> empty(static_cast<size_t>(dim), 5.0f);
      PoolQuantizedBag(f.Rows(ids).data(), 0, 0, nullptr, true, dim, precision, empty.data());
      EXPECT_EQ(empty, std::vector<float>(static_cast<size_t>(dim), 0.0f));
    }
  }
}

TEST(QuantizedRow, PooledBagsAreCloseToTheDequantizedRowsSum) {
  const Fixture f(kInt8, 16);
  const std::vector<int64_t> ids = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  std::vector<float> out(16), sum(16, 0.0f), row(16);
  PoolQuantizedBag(f.Rows(ids).data(), 10, 10, nullptr, false, 16, kInt8, out.data());
  for (const int64_t id : ids) {
    DequantizeRow(f.table.data() + id * f.row_bytes, 16, kInt8, row.data());
    for (int k = 0; k < 16; ++k) sum[k] += row[k];
  }
  for (int k = 0; k < 16; ++k) EXPECT_NEAR(out[k], sum[k], 1e-5f) << k;
}

TEST(QuantizedRow, AQuantizedTableHoldsCodesOnlyAndStartsFromItsInitializersValues) {
  EmbeddingTable<float> fp32("t", 40, 16);
  EmbeddingTable<float> int8("t", 40, 16, kInt8);
  config::Initializer init;
  fp32.Initialize(init, 7, 2);
  int8.Initialize(init, 7, 2);
  EXPECT_TRUE(int8.data().empty());
  EXPECT_EQ(int8.codes().size(), size_t{40 * 20});
  EXPECT_EQ(int8.memory_bytes(), 40 * 20);
  EXPECT_EQ(fp32.memory_bytes(), 40 * 64);
  std::vector<uint8_t> expected(20);
  for (int64_t r = 0; r < 40; ++r) {
    QuantizeRow(fp32.row(r), 16, kInt8, expected.data());
    EXPECT_EQ(0, std::memcmp(expected.data(), int8.code_row(r), 20)) << "row " << r;
  }
}

}  // namespace
}  // namespace dlrm

// BF16 / FP16 tables in the Engine (issue 16): they train bitwise alike at any thread
// count with either rounding, hold half the bytes, train close to FP32, checkpoint and
// resume bitwise, read widened and write narrowed, export as they are or quantized, and
// are refused with a message naming the field wherever they cannot be held yet.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include "engine/checkpoint/checkpoint_file.h"
#include "engine/config/config.h"
#include "engine/core/status.h"
#include "engine/embedding/half_row.h"
#include "engine/engine.h"
#include "tests/support/test_support.h"

namespace dlrm {
namespace {

constexpr int64_t kBatch = 8;
constexpr int32_t kDim = 12;  // one 8-column block for the AVX2 kernels, and a tail

// SmallConfigText's model at dim 12 with both tables of `precision`, row-wise Adagrad.
config::DlrmConfig Config(config::TableConfig::Precision precision,
                          config::TableConfig::Rounding rounding, int threads = 1) {
  config::DlrmConfig c = ParseConfigText(testing::SmallConfigText(
      "sparse_optimizer { learning_rate: 0.05 rowwise_adagrad {} }", threads));
  c.mutable_model()->mutable_bottom_mlp()->set_layer_sizes(1, kDim);
  for (config::TableConfig& table : *c.mutable_model()->mutable_tables()) {
    table.set_dim(kDim);
    table.set_precision(precision);
    if (precision != config::TableConfig::FP32) table.set_rounding(rounding);
  }
  return c;
}

void Train(Engine& engine, int first, int steps) {
  for (int s = first; s < first + steps; ++s)
    engine.TrainStep(testing::SmallBatch(kBatch, static_cast<uint64_t>(s), s % 2 == 0).view());
}

std::vector<float> Predictions(const Engine& engine) {
  std::vector<float> out;
  for (uint64_t salt = 900; salt < 906; ++salt) {
    std::vector<float> p(kBatch);
    engine.Predict(testing::SmallBatch(kBatch, salt, true).view(), p.data(), kBatch);
    out.insert(out.end(), p.begin(), p.end());
  }
  return out;
}

std::vector<float> Table(const Engine& engine, const std::string& name) {
  return testing::ParameterValues(engine).at("embedding." + name + ".weight");
}

TEST(HalfTables, TrainBitwiseAlikeAtOneTwoAndFourThreadsWithEitherRounding) {
  for (auto precision : {config::TableConfig::BF16, config::TableConfig::FP16}) {
    for (auto rounding : {config::TableConfig::NEAREST, config::TableConfig::STOCHASTIC}) {
      Engine one(Config(precision, rounding, 1));
      Train(one, 0, 12);
      for (int threads : {2, 4}) {
        Engine many(Config(precision, rounding, threads));
        Train(many, 0, 12);
        EXPECT_TRUE(
            testing::BitwiseEqual(testing::ParameterValues(one), testing::ParameterValues(many)))
            << config::TableConfig::Precision_Name(precision) << " "
            << config::TableConfig::Rounding_Name(rounding) << " at " << threads << " threads";
        EXPECT_EQ(Predictions(one), Predictions(many));
      }
    }
  }
}

TEST(HalfTables, RowsStay16BitValuesAndTheRoundingModeDecidesThem) {
  for (auto precision : {config::TableConfig::BF16, config::TableConfig::FP16}) {
    Engine nearest(Config(precision, config::TableConfig::NEAREST));
    Engine stochastic(Config(precision, config::TableConfig::STOCHASTIC));
    EXPECT_EQ(Table(nearest, "t0"), Table(stochastic, "t0")) << "initialized to nearest alike";
    Train(nearest, 0, 12);
    Train(stochastic, 0, 12);
    EXPECT_NE(Table(nearest, "t0"), Table(stochastic, "t0"));
    for (const Engine* engine : {&nearest, &stochastic})
      for (const float x : Table(*engine, "t0"))
        ASSERT_EQ(FloatFromHalf(HalfFromFloat(x, precision), precision), x) << "a 16-bit value";
  }
}

TEST(HalfTables, HoldHalfTheBytesAndTrainCloseToFp32) {
  Engine fp32(Config(config::TableConfig::FP32, config::TableConfig::NEAREST));
  Engine bf16(Config(config::TableConfig::BF16, config::TableConfig::STOCHASTIC));
  Engine fp16(Config(config::TableConfig::FP16, config::TableConfig::NEAREST));
  // Row-wise Adagrad's state is one fp32 per row (40 rows of t0) beside the weights.
  const int64_t state = 40 * 4, weights = 40 * kDim * 4;
  EXPECT_EQ(fp32.GetTableStats("t0").memory_bytes, weights + state);
  EXPECT_EQ(bf16.GetTableStats("t0").memory_bytes, weights / 2 + state);
  EXPECT_EQ(fp16.GetTableStats("t0").memory_bytes, weights / 2 + state);
  Train(fp32, 0, 40);
  Train(bf16, 0, 40);
  Train(fp16, 0, 40);
  const std::vector<float> want = Predictions(fp32);
  for (const Engine* engine : {&bf16, &fp16}) {
    const std::vector<float> got = Predictions(*engine);
    for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 0.02) << i;
  }
}

TEST(HalfTables, ACheckpointHoldsThe16BitRowsAndResumesBitwise) {
  const std::string dir = testing::TempDir("half_tables_checkpoint");
  const config::DlrmConfig config =
      Config(config::TableConfig::BF16, config::TableConfig::STOCHASTIC);
  Engine whole(config);
  Train(whole, 0, 12);
  Engine first(config);
  Train(first, 0, 6);
  first.Save(dir + "/half.ckpt");
  const CheckpointReader reader(dir + "/half.ckpt");
  EXPECT_EQ(reader.Tensor("embedding.t0.weight").dtype(), checkpoint::TensorEntry::BFLOAT16);
  EXPECT_EQ(reader.Tensor("embedding.t0.weight").num_bytes(), 40 * kDim * 2);
  const auto resumed = Engine::FromCheckpoint(dir + "/half.ckpt");
  Train(*resumed, 6, 6);
  EXPECT_TRUE(
      testing::BitwiseEqual(testing::ParameterValues(*resumed), testing::ParameterValues(whole)));
  // A BF16 checkpoint is not an FP32 model's, nor an FP16 one's.
  for (auto other : {config::TableConfig::FP32, config::TableConfig::FP16}) {
    Engine engine(Config(other, config::TableConfig::NEAREST));
    testing::ExpectError([&] { engine.Load(dir + "/half.ckpt"); }, StatusCode::kFailedPrecondition,
                         "precision");
  }
}

TEST(HalfTables, ParametersReadWidenedAndWriteNarrowedToNearest) {
  Engine engine(Config(config::TableConfig::FP16, config::TableConfig::STOCHASTIC));
  std::vector<float> values(40 * kDim);
  for (size_t i = 0; i < values.size(); ++i)
    values[i] = static_cast<float>(std::sin(0.1 * static_cast<double>(i))) * 1e-2f;
  values[5] = 1e6f;  // past FP16's range: held at 65504
  engine.WriteParameter("embedding.t0.weight", values.data(), static_cast<int64_t>(values.size()));
  const std::vector<float> read = Table(engine, "t0");
  for (size_t i = 0; i < values.size(); ++i)
    ASSERT_EQ(read[i], FloatFromHalf(HalfFromFloat(values[i], config::TableConfig::FP16),
                                     config::TableConfig::FP16));
  EXPECT_EQ(read[5], 65504.0f);
  // Bad writes change nothing.
  const auto before = testing::ParameterValues(engine);
  values[7] = std::numeric_limits<float>::infinity();
  testing::ExpectError(
      [&] {
        engine.WriteParameter("embedding.t0.weight", values.data(),
                              static_cast<int64_t>(values.size()));
      },
      StatusCode::kInvalidArgument, "values[7]");
  testing::ExpectError([&] { engine.WriteParameter("embedding.t0.weight", values.data(), 3); },
                       StatusCode::kInvalidArgument, "has 480 values but 3 were given");
  EXPECT_TRUE(testing::BitwiseEqual(testing::ParameterValues(engine), before));
}

TEST(HalfTables, ExportKeepsThemOrQuantizesThem) {
  const std::string dir = testing::TempDir("half_tables_export");
  Engine engine(Config(config::TableConfig::BF16, config::TableConfig::NEAREST));
  Train(engine, 0, 20);
  engine.Export(dir + "/kept.serving");
  const auto kept = Engine::FromCheckpoint(dir + "/kept.serving");
  EXPECT_EQ(kept->config().model().tables(0).precision(), config::TableConfig::BF16);
  EXPECT_EQ(Predictions(*kept), Predictions(engine));
  engine.Export(dir + "/int8.serving", config::TableConfig::INT8);
  const auto int8 = Engine::FromCheckpoint(dir + "/int8.serving");
  EXPECT_EQ(int8->config().model().tables(0).precision(), config::TableConfig::INT8);
  const std::vector<float> want = Predictions(engine), got = Predictions(*int8);
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 0.01) << i;
}

TEST(HalfTables, RefusedWhereTheyCannotBeHeldNamingTheField) {
  auto refused = [](config::DlrmConfig c, const std::string& needle) {
    testing::ExpectError([&] { Engine engine(c); }, StatusCode::kInvalidArgument, needle);
  };
  config::DlrmConfig c = Config(config::TableConfig::FP32, config::TableConfig::NEAREST);
  c.mutable_model()->mutable_tables(1)->set_rounding(config::TableConfig::STOCHASTIC);
  refused(c, "model.tables[1].rounding is set but model.tables[1].precision is FP32");
  // SSD tables take 16-bit rows, not quantized ones.
  c = Config(config::TableConfig::FP16, config::TableConfig::NEAREST);
  c.mutable_model()->mutable_tables(1)->mutable_ssd()->set_cache_bytes(1 << 20);
  c.set_ssd_dir(testing::TempDir("half_tables_ssd"));
  c.mutable_model()->mutable_tables(1)->clear_rounding();
  c.mutable_model()->mutable_tables(1)->set_precision(config::TableConfig::INT8);
  refused(c,
          "model.tables[1].ssd is set but model.tables[1].precision is INT8: the SSD tier "
          "holds FP32, BF16 and FP16 rows");
  // Embedding servers hold 16-bit rows, not quantized serving ones.
  c = Config(config::TableConfig::BF16, config::TableConfig::NEAREST);
  RequireFixedTables(c.model(), "embedding servers");
  c.mutable_model()->mutable_tables(0)->set_precision(config::TableConfig::INT8);
  testing::ExpectError([&] { RequireFixedTables(c.model(), "embedding servers"); },
                       StatusCode::kInvalidArgument,
                       "model.tables[0] (\"t0\") has precision INT8 (a quantized serving table), "
                       "which embedding servers does not take yet");
}

}  // namespace
}  // namespace dlrm

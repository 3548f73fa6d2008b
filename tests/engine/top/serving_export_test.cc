// Serving export (issue 14): Engine::Export writes a compact read-only model (dense
// parameters, every table's weights, a DYNAMIC table's ids and rows; no optimizer or
// admission state) that Engine::FromCheckpoint loads and that predicts bitwise as the
// engine it came from, an SSD table's rows included. Damaged or misused files are refused
// naming what is wrong. Quantized exports (issue 16: INT8 / INT4 row-wise tables) predict
// close to the FP32 model from the codes and refuse everything that would write a row.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "engine/checkpoint/checkpoint_file.h"
#include "engine/checkpoint/codec.h"
#include "engine/config/config.h"
#include "engine/core/status.h"
#include "engine/embedding/dynamic_rows.h"
#include "engine/embedding/half_bits.h"
#include "engine/embedding/half_row.h"
#include "engine/embedding/quantized_row.h"
#include "engine/engine.h"
#include "engine/train/memory_budget.h"
#include "tests/support/test_support.h"

namespace dlrm {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kBatch = 4;  // at most 12 ids of t1 per batch: its SSD cache's rows

// SmallConfigText's model, Adam; t0 DYNAMIC with 30 rows for its 40 ids (it evicts), t1 on
// the SSD tier with a cache of 12 of its 25 rows.
config::DlrmConfig Config(const std::string& dir) {
  config::DlrmConfig c = ParseConfigText(
      testing::SmallConfigText("sparse_optimizer { learning_rate: 0.05 adam {} }", 2));
  config::TableConfig* t0 = c.mutable_model()->mutable_tables(0);
  t0->set_num_rows(30);
  t0->set_kind(config::TableConfig::DYNAMIC);
  config::TableConfig* t1 = c.mutable_model()->mutable_tables(1);
  t1->mutable_ssd()->set_cache_bytes(SsdCacheBytes(c, 1, 12));
  c.set_ssd_dir(dir);
  return c;
}

void Train(Engine& engine, int steps) {
  for (int s = 0; s < steps; ++s)
    engine.TrainStep(testing::SmallBatch(kBatch, static_cast<uint64_t>(s), s % 2 == 0).view());
}

std::vector<float> Predictions(const Engine& engine) {
  std::vector<float> out;
  for (uint64_t salt = 900; salt < 910; ++salt) {  // seen and unseen ids alike
    std::vector<float> p(kBatch);
    engine.Predict(testing::SmallBatch(kBatch, salt, false).view(), p.data(), kBatch);
    out.insert(out.end(), p.begin(), p.end());
  }
  return out;
}

TEST(ServingExport, PredictsBitwiseAsTheEngineItCameFrom) {
  const std::string dir = testing::TempDir("serving_export");
  Engine engine(Config(dir));
  Train(engine, 30);
  ASSERT_GT(engine.GetTableStats("t0").counts.evicted, 0);
  ASSERT_GT(engine.GetTableStats("t1").counts.evicted, 0);
  engine.Export(dir + "/model.serving");
  engine.Save(dir + "/model.ckpt");
  EXPECT_LT(std::filesystem::file_size(dir + "/model.serving"),
            std::filesystem::file_size(dir + "/model.ckpt"));  // no optimizer state

  const auto served = Engine::FromCheckpoint(dir + "/model.serving");
  EXPECT_EQ(served->step(), 30);
  EXPECT_FALSE(served->config().model().tables(1).has_ssd());  // held in memory
  EXPECT_EQ(Predictions(*served), Predictions(engine));
  EXPECT_TRUE(
      testing::BitwiseEqual(testing::ParameterValues(*served), testing::ParameterValues(engine)));
  const CheckpointReader reader(dir + "/model.serving");
  for (const std::string& name : reader.TensorNames())
    EXPECT_EQ(name.find("optimizer"), std::string::npos) << name;
}

// A DYNAMIC table of BF16 rows (stochastic rounding) and an SSD table of BF16 rows (read
// whole from its store) are exported with their rows in 16 bits (BFLOAT16 tensors, the
// DYNAMIC one's beside its ids) and predict bitwise as the engine; a checkpoint of them
// resumes bitwise.
TEST(ServingExport, SixteenBitDynamicAndSsdTablesKeepTheirRows) {
  const std::string dir = testing::TempDir("serving_export_bf16");
  config::DlrmConfig c = Config(dir);
  c.mutable_model()->mutable_tables(0)->set_precision(config::TableConfig::BF16);
  c.mutable_model()->mutable_tables(0)->set_rounding(config::TableConfig::STOCHASTIC);
  c.mutable_model()->mutable_tables(1)->set_precision(config::TableConfig::BF16);
  c.mutable_model()->mutable_tables(1)->mutable_ssd()->set_cache_bytes(SsdCacheBytes(c, 1, 12));
  Engine engine(c);
  Train(engine, 30);
  ASSERT_GT(engine.GetTableStats("t0").counts.evicted, 0);
  ASSERT_GT(engine.GetTableStats("t1").counts.evicted, 0);
  engine.Export(dir + "/model.serving");
  const CheckpointReader reader(dir + "/model.serving");
  for (const char* name : {"embedding.t0.weight", "embedding.t1.weight"})
    EXPECT_EQ(reader.Tensor(name).dtype(), checkpoint::TensorEntry::BFLOAT16) << name;
  const auto served = Engine::FromCheckpoint(dir + "/model.serving");
  EXPECT_EQ(Predictions(*served), Predictions(engine));
  engine.Save(dir + "/model.ckpt");
  const auto resumed = Engine::FromCheckpoint(dir + "/model.ckpt");
  Train(engine, 5);
  Train(*resumed, 5);
  EXPECT_TRUE(
      testing::BitwiseEqual(testing::ParameterValues(*resumed), testing::ParameterValues(engine)));
}

// Rewrites the checkpoint file at path with every tensor as it was but `name`, whose bytes
// and shape edit() changes, stored as `dtype` when given.
void RewriteTensor(const std::string& path, const std::string& name,
                   const std::function<void(std::vector<char>*, std::vector<int64_t>*)>& edit,
                   std::optional<checkpoint::TensorEntry::DType> dtype = std::nullopt) {
  const CheckpointReader reader(path);
  CheckpointWriter writer;
  for (const auto& [key, value] : reader.metadata()) writer.SetMetadata(key, value);
  for (const std::string& tensor : reader.TensorNames()) {
    const checkpoint::TensorEntry& entry = reader.Tensor(tensor);
    std::vector<int64_t> shape(entry.shape().begin(), entry.shape().end());
    std::vector<char> bytes(static_cast<size_t>(entry.num_bytes()));
    reader.ReadTensor(tensor, entry.dtype(), shape, bytes.data());
    if (tensor == name) edit(&bytes, &shape);
    writer.AddTensorCopy(tensor, tensor == name && dtype ? *dtype : entry.dtype(), shape,
                         bytes.data(), bytes.size());
  }
  writer.WriteAtomic(path);
}

// The serving model at path with INT64 tensor `name` replaced by `values`.
void ReplaceIds(const std::string& path, const std::string& name, std::vector<int64_t> values) {
  RewriteTensor(path, name, [&](std::vector<char>* bytes, std::vector<int64_t>* shape) {
    bytes->resize(values.size() * sizeof(int64_t));
    std::memcpy(bytes->data(), values.data(), bytes->size());
    *shape = {static_cast<int64_t>(values.size())};
  });
}

TEST(ServingExport, DamagedOrMisusedFilesAreRefusedNamingWhatIsWrong) {
  const std::string dir = testing::TempDir("serving_export_bad");
  const std::string path = dir + "/model.serving";
  Engine engine(Config(dir));
  Train(engine, 10);
  engine.Export(path);
  try {  // a serving model is not a training checkpoint
    engine.Load(path);
    FAIL() << "Load took a serving model";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), StatusCode::kFailedPrecondition);
    EXPECT_THAT(e.what(), HasSubstr(checkpoint::kServingFormat));
  }
  const CheckpointReader reader(path);
  std::vector<int64_t> rows(static_cast<size_t>(reader.TensorShape("dynamic.t0.rows")[0]));
  reader.ReadTensor("dynamic.t0.rows", checkpoint::TensorEntry::INT64,
                    {static_cast<int64_t>(rows.size())}, rows.data());
  ASSERT_GE(rows.size(), 2u);
  const std::vector<int64_t> good = rows;
  rows[1] = rows[0];
  ReplaceIds(path, "dynamic.t0.rows", rows);
  auto expect_data_loss = [&](const std::string& what) {
    try {
      Engine::FromCheckpoint(path);
      FAIL() << "loaded a damaged serving model: " << what;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), StatusCode::kDataLoss) << e.what();
      EXPECT_THAT(e.what(), HasSubstr(what));
    }
  };
  expect_data_loss("dynamic table \"t0\": dynamic table state: row " + std::to_string(good[0]) +
                   " is given twice");
  rows = good;
  rows[0] = 30;  // the table has 30 rows
  ReplaceIds(path, "dynamic.t0.rows", rows);
  expect_data_loss("row 30 is outside [0, 30)");
  rows.pop_back();
  ReplaceIds(path, "dynamic.t0.rows", rows);
  expect_data_loss("has " + std::to_string(good.size()) + " ids but " +
                   std::to_string(rows.size()) + " rows");
}

// A review's finding (2026-11-28): `dlrm export --checkpoint=m.ckpt --out=m.ckpt` replaced
// the training checkpoint by its serving model, the optimizer state (and quantized, the
// weights) gone. An export over an earlier export still replaces it.
TEST(ServingExport, AnExportNeverReplacesATrainingCheckpoint) {
  const std::string dir = testing::TempDir("serving_export_over");
  Engine engine(Config(dir));
  Train(engine, 5);
  const std::string checkpoint = dir + "/model.ckpt";
  engine.Save(checkpoint);
  const std::string before = testing::FileContents(checkpoint);
  try {
    engine.Export(checkpoint, config::TableConfig::INT4);
    FAIL() << "an export replaced a training checkpoint";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), StatusCode::kFailedPrecondition);
    EXPECT_THAT(e.what(), HasSubstr("would replace a file of format \"" +
                                    std::string(checkpoint::kEngineFormat) + "\""));
  }
  EXPECT_EQ(testing::FileContents(checkpoint), before);
  const std::string serving = dir + "/model.serving";
  engine.Export(serving, config::TableConfig::INT8);
  engine.Export(serving);  // over an export: replaced, now FP32
  EXPECT_EQ(Engine::FromCheckpoint(serving)->config().model().tables(0).precision(),
            config::TableConfig::FP32);
}

// A review's finding (2026-11-28): an export reads an SSD table whole into memory, and did
// so unchecked: a table larger than memory died of bad_alloc naming nothing.
TEST(ServingExport, AnExportThatCannotStageItsRowsIsRefusedNamingTheTable) {
  const std::string dir = testing::TempDir("serving_export_staging");
  config::DlrmConfig c = Config(dir);
  c.mutable_model()->mutable_tables(1)->set_num_rows(1000000);  // 16 MB of rows on the SSD
  const int64_t model = train::ModelMemoryBytes(c), staged = 1000000 * 4 * 4;
  c.set_memory_limit_bytes(model + staged - 1);
  Engine engine(c);
  const std::string path = dir + "/model.serving";
  testing::ExpectError([&] { engine.Export(path); }, StatusCode::kResourceExhausted,
                       "export needs 16000000 bytes of rows staged beside the model's " +
                           std::to_string(model) + " (the most for table \"t1\"");
  EXPECT_FALSE(std::filesystem::exists(path));
  c.set_memory_limit_bytes(model + staged);
  Engine roomy(c);
  roomy.Export(path);
  EXPECT_EQ(CheckpointReader(path).TensorShape("embedding.t1.weight"),
            (std::vector<int64_t>{1000000, 4}));
}

constexpr auto kInt8 = config::TableConfig::INT8;
constexpr auto kInt4 = config::TableConfig::INT4;

// The largest |a[i] - b[i]|.
float MaxAbsDiff(const std::vector<float>& a, const std::vector<float>& b) {
  float most = 0;
  for (size_t i = 0; i < a.size(); ++i) most = std::max(most, std::abs(a[i] - b[i]));
  return most;
}

TEST(ServingExport, QuantizedModelsPredictCloseToTheFp32ModelFromTheirCodes) {
  const std::string dir = testing::TempDir("serving_export_quantized");
  Engine engine(Config(dir));  // DYNAMIC t0 (evicting), SSD t1, Adam
  Train(engine, 30);
  engine.Export(dir + "/fp32.serving");
  engine.Export(dir + "/int8.serving", kInt8);
  engine.Export(dir + "/int4.serving", kInt4);
  const auto fp32 = Engine::FromCheckpoint(dir + "/fp32.serving");
  const auto int8 = Engine::FromCheckpoint(dir + "/int8.serving");
  const auto int4 = Engine::FromCheckpoint(dir + "/int4.serving");
  const std::vector<float> p = Predictions(*fp32), p8 = Predictions(*int8), p4 = Predictions(*int4);
  EXPECT_NE(p8, p);  // the codes are what is pooled
  EXPECT_LT(MaxAbsDiff(p8, p), 0.005f);
  EXPECT_LT(MaxAbsDiff(p4, p), 0.05f);
  EXPECT_EQ(Predictions(*int8), p8);  // and again, the same bits
  for (const auto* served : {int8.get(), int4.get()}) {
    for (const auto& table : served->config().model().tables())
      EXPECT_TRUE(IsQuantized(table.precision())) << table.name();
    EXPECT_TRUE(served->config().sparse_optimizer().has_sgd());  // no state for the rows
  }
  // dim 4: 4 + 4 bytes a row (INT4: 2 + 4) in place of 16.
  EXPECT_EQ(int8->GetTableStats("t1").memory_bytes, 25 * 8);
  EXPECT_EQ(int4->GetTableStats("t1").memory_bytes, 25 * 6);
  EXPECT_LT(std::filesystem::file_size(dir + "/int8.serving"),
            std::filesystem::file_size(dir + "/fp32.serving"));
}

constexpr auto kFp32 = config::TableConfig::FP32;

TEST(ServingExport, SixteenBitDenseParametersAreTheirRoundedValuesInHalfTheBytes) {
  const std::string dir = testing::TempDir("serving_export_dense16");
  Engine engine(Config(dir));
  Train(engine, 30);
  engine.Export(dir + "/fp32.serving");
  const auto fp32 = Engine::FromCheckpoint(dir + "/fp32.serving");
  const std::vector<float> p = Predictions(*fp32);
  const auto trained = testing::ParameterValues(engine);
  int64_t dense_values = 0;
  for (const auto& [name, values] : trained)
    if (name.rfind("embedding.", 0) != 0) dense_values += static_cast<int64_t>(values.size());
  for (const auto precision : {config::TableConfig::BF16, config::TableConfig::FP16}) {
    SCOPED_TRACE(PrecisionName(precision));
    const std::string path = dir + "/" + PrecisionName(precision) + ".serving";
    engine.Export(path, kFp32, precision);
    EXPECT_EQ(CheckpointReader(path).Tensor("top_mlp.0.weight").dtype(),
              precision == config::TableConfig::BF16 ? checkpoint::TensorEntry::BFLOAT16
                                                     : checkpoint::TensorEntry::FLOAT16);
    // Every dense tensor takes half its FP32 bytes; the file shrinks by about that much
    // (tensors are 64-byte aligned).
    const CheckpointReader narrow(path), wide(dir + "/fp32.serving");
    int64_t halved = 0;
    for (const auto& [name, values] : trained) {
      if (name.rfind("embedding.", 0) == 0) continue;
      EXPECT_EQ(2 * narrow.Tensor(name).num_bytes(), wide.Tensor(name).num_bytes()) << name;
      halved += static_cast<int64_t>(narrow.Tensor(name).num_bytes());
    }
    EXPECT_EQ(halved, 2 * dense_values);
    EXPECT_LT(std::filesystem::file_size(path), std::filesystem::file_size(dir + "/fp32.serving"));
    const auto served = Engine::FromCheckpoint(path);
    for (const auto& [name, values] : testing::ParameterValues(*served)) {
      const std::vector<float>& from = trained.at(name);
      const bool dense = name.rfind("embedding.", 0) != 0;
      for (size_t i = 0; i < values.size(); ++i) {
        const float want =
            dense ? FloatFromHalf(HalfFromFloat(from[i], precision), precision) : from[i];
        ASSERT_EQ(std::memcmp(&values[i], &want, sizeof want), 0) << name << "[" << i << "]";
      }
    }
    const std::vector<float> got = Predictions(*served);
    EXPECT_LT(MaxAbsDiff(got, p), 0.005f);
    EXPECT_EQ(Predictions(*served), got);
  }
  engine.Export(dir + "/int8_fp16.serving", kInt8, config::TableConfig::FP16);
  EXPECT_LT(MaxAbsDiff(Predictions(*Engine::FromCheckpoint(dir + "/int8_fp16.serving")), p),
            0.005f);
}

TEST(ServingExport, ADensePrecisionItCannotWriteOrReadIsRefusedNamingIt) {
  const std::string dir = testing::TempDir("serving_export_dense_bad");
  Engine engine(Config(dir));
  Train(engine, 5);
  const std::string path = dir + "/model.serving";
  for (const auto dense : {kInt8, static_cast<config::TableConfig::Precision>(99)}) {
    try {
      engine.Export(path, kFp32, dense);
      FAIL() << "exported dense parameters as " << static_cast<int>(dense);
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), StatusCode::kInvalidArgument);
      EXPECT_THAT(e.what(), HasSubstr("dense (the dense parameters' precision) must be FP32, "
                                      "BF16 or FP16, got " +
                                      std::to_string(static_cast<int>(dense))));
    }
    EXPECT_FALSE(std::filesystem::exists(path));
  }
  // A dense tensor of a dtype no export writes.
  engine.Export(path, kFp32, config::TableConfig::BF16);
  RewriteTensor(
      path, "top_mlp.0.bias",
      [](std::vector<char>* bytes, std::vector<int64_t>* shape) {
        bytes->resize(static_cast<size_t>(shape->at(0)));  // a byte a value
      },
      checkpoint::TensorEntry::UINT8);
  try {
    Engine::FromCheckpoint(path);
    FAIL() << "loaded a dense tensor of UINT8";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("tensor 'top_mlp.0.bias': expected dtype FLOAT32"));
  }
  // A training checkpoint's dense parameters are fp32 only; the engine stays as it was.
  engine.Save(dir + "/model.ckpt");
  const std::vector<float> before = Predictions(engine);
  RewriteTensor(
      dir + "/model.ckpt", "top_mlp.0.bias",
      [](std::vector<char>* bytes, std::vector<int64_t>*) { bytes->resize(bytes->size() / 2); },
      checkpoint::TensorEntry::BFLOAT16);
  try {
    engine.Load(dir + "/model.ckpt");
    FAIL() << "restored 16-bit dense parameters into a training engine";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("tensor 'top_mlp.0.bias': expected dtype FLOAT32"));
  }
  EXPECT_EQ(Predictions(engine), before);
}

TEST(ServingExport, AQuantizedTablesParameterIsItsCodesValues) {
  const std::string dir = testing::TempDir("serving_export_quantized_read");
  Engine engine(Config(dir));
  Train(engine, 10);
  engine.Export(dir + "/int8.serving", kInt8);
  const auto int8 = Engine::FromCheckpoint(dir + "/int8.serving");
  const auto fp32 = testing::ParameterValues(engine);
  const auto values = testing::ParameterValues(*int8);
  for (const char* name : {"embedding.t0.weight", "embedding.t1.weight"}) {
    const std::vector<float>& want = fp32.at(name);
    const std::vector<float>& got = values.at(name);
    ASSERT_EQ(got.size(), want.size()) << name;
    for (size_t r = 0; r * 4 < want.size(); ++r) {  // within half a step of its row's range
      const auto row = want.begin() + static_cast<std::ptrdiff_t>(r * 4);
      const auto [lo, hi] = std::minmax_element(row, row + 4);
      for (size_t k = 0; k < 4; ++k)
        EXPECT_NEAR(got[r * 4 + k], want[r * 4 + k], (*hi - *lo) / 255 / 2 * 1.001f + 1e-7f)
            << name << " row " << r;
    }
  }
  EXPECT_EQ(values.at("top_mlp.0.weight"), fp32.at("top_mlp.0.weight"));  // dense kept
}

TEST(ServingExport, AQuantizedModelRefusesEverythingThatWritesARowAndStaysAsItWas) {
  const std::string dir = testing::TempDir("serving_export_quantized_refused");
  Engine engine(Config(dir));
  Train(engine, 10);
  engine.Save(dir + "/model.ckpt");
  engine.Export(dir + "/int8.serving", kInt8);
  const auto int8 = Engine::FromCheckpoint(dir + "/int8.serving");
  const std::vector<float> before = Predictions(*int8);
  const std::string named = "model.tables[0] (\"t0\") has precision INT8";
  const auto batch = testing::SmallBatch(kBatch, 1);
  testing::ExpectError([&] { int8->TrainStep(batch.view()); }, StatusCode::kFailedPrecondition,
                       named + " (a quantized serving table, read-only): training");
  testing::ExpectError([&] { int8->SubmitTrainStep(batch.view()); },
                       StatusCode::kFailedPrecondition, named);
  testing::ExpectError([&] { int8->Save(dir + "/again.ckpt"); }, StatusCode::kFailedPrecondition,
                       named + " (a quantized serving table, read-only): Save");
  EXPECT_FALSE(std::filesystem::exists(dir + "/again.ckpt"));
  testing::ExpectError([&] { int8->Load(dir + "/model.ckpt"); }, StatusCode::kFailedPrecondition,
                       named);
  const std::vector<float> row(40 * 4, 0.5f);
  testing::ExpectError([&] { int8->WriteParameter("embedding.t1.weight", row.data(), 100); },
                       StatusCode::kFailedPrecondition,
                       "parameter \"embedding.t1.weight\" is a table of precision INT8");
  testing::ExpectError(
      [&] { int8->Export(dir + "/int4.serving", kInt4); }, StatusCode::kFailedPrecondition,
      "export: model.tables[0] (\"t0\") is already INT8; it cannot be exported as INT4");
  testing::ExpectError(
      [&] { engine.Export(dir + "/bad.serving", static_cast<config::TableConfig::Precision>(2)); },
      StatusCode::kInvalidArgument, "export: quantize must be FP32, INT8 or INT4, got 2");
  EXPECT_EQ(Predictions(*int8), before);
  EXPECT_EQ(int8->step(), 10);
  // Re-exported as it is, it keeps its codes: the same predictions.
  int8->Export(dir + "/again.serving");
  EXPECT_EQ(Predictions(*Engine::FromCheckpoint(dir + "/again.serving")), before);
}

// The INT8 serving model at path with row `row` of table `key`'s scale set to `scale`
// (as fp16 bits).
void DamageScale(const std::string& path, const std::string& key, int64_t row, float scale) {
  const uint16_t bits = half_bits::Fp16Narrow(scale, false, 0);
  RewriteTensor(path, checkpoint::EmbeddingWeightName(key),
                [&](std::vector<char>* bytes, std::vector<int64_t>* shape) {
                  const int64_t row_bytes = (*shape)[1];  // codes, scale, bias
                  std::memcpy(bytes->data() + row * row_bytes + row_bytes - 4, &bits, sizeof bits);
                });
}

TEST(ServingExport, AQuantizedRowWithABadScaleIsRefusedNamingTableAndRow) {
  const std::string dir = testing::TempDir("serving_export_quantized_damaged");
  Engine engine(Config(dir));
  Train(engine, 5);
  const std::string path = dir + "/int8.serving";
  for (const float bad : {std::numeric_limits<float>::quiet_NaN(), -0.5f}) {
    engine.Export(path, kInt8);
    DamageScale(path, "t1", 7, bad);
    testing::ExpectError([&] { Engine::FromCheckpoint(path); }, StatusCode::kDataLoss,
                         "table \"t1\" (INT8) row 7 has a scale or bias that is not finite");
  }
}

TEST(ServingExport, ARowBeyondTheFp16RangeIsNotQuantizedAndNamed) {
  const std::string dir = testing::TempDir("serving_export_quantized_range");
  Engine engine(ParseConfigText(testing::SmallConfigText()));
  Train(engine, 3);
  std::vector<float> t1(25 * 4);
  engine.ReadParameter("embedding.t1.weight", t1.data(), 100);
  t1[6 * 4 + 2] = -70000.0f;  // a float an fp16 scale or bias cannot hold
  engine.WriteParameter("embedding.t1.weight", t1.data(), 100);
  const std::vector<float> before = Predictions(engine);
  for (const auto precision : {kInt8, kInt4})
    testing::ExpectError([&] { engine.Export(dir + "/q.serving", precision); },
                         StatusCode::kFailedPrecondition,
                         "export: table \"t1\" row 6 has a value beyond +-65504, which " +
                             std::string(PrecisionName(precision)) +
                             " rows' fp16 scale and bias cannot hold; export it unquantized");
  EXPECT_FALSE(std::filesystem::exists(dir + "/q.serving"));
  EXPECT_EQ(Predictions(engine), before);
  engine.Export(dir + "/fp32.serving");
  EXPECT_EQ(Predictions(*Engine::FromCheckpoint(dir + "/fp32.serving")), before);
}

// A dense parameter beyond fp16's range is not exported as fp16 (it would saturate, as a
// quantized table's row is refused): FAILED_PRECONDITION naming it, nothing written; bf16
// holds it.
TEST(ServingExport, ADenseParameterBeyondTheFp16RangeIsNotNarrowedAndNamed) {
  const std::string dir = testing::TempDir("serving_export_dense_range");
  Engine engine(ParseConfigText(testing::SmallConfigText()));
  Train(engine, 3);
  std::vector<float> bias(testing::ParameterValues(engine).at("top_mlp.0.bias").size());
  engine.ReadParameter("top_mlp.0.bias", bias.data(), static_cast<int64_t>(bias.size()));
  bias[1] = 1e5f;
  engine.WriteParameter("top_mlp.0.bias", bias.data(), static_cast<int64_t>(bias.size()));
  testing::ExpectError(
      [&] { engine.Export(dir + "/fp16.serving", kFp32, config::TableConfig::FP16); },
      StatusCode::kFailedPrecondition,
      "dense parameter top_mlp.0.bias[1] = 100000 is beyond fp16's range (+-65504)");
  EXPECT_FALSE(std::filesystem::exists(dir + "/fp16.serving"));
  engine.Export(dir + "/bf16.serving", kFp32, config::TableConfig::BF16);
  EXPECT_TRUE(std::filesystem::exists(dir + "/bf16.serving"));
}

// An older export's INT8 rows: each row's codes, then its scale and bias as two fp32.
TEST(ServingExport, AnOlderExportsFp32ScaleAndBiasAreRefusedNamingTheTable) {
  const std::string dir = testing::TempDir("serving_export_quantized_fp32_tail");
  Engine engine(Config(dir));
  Train(engine, 5);
  const std::string path = dir + "/int8.serving";
  engine.Export(path, kInt8);
  RewriteTensor(path, checkpoint::EmbeddingWeightName("t1"),
                [&](std::vector<char>* bytes, std::vector<int64_t>* shape) {
                  const int64_t rows = (*shape)[0], row_bytes = (*shape)[1], codes = row_bytes - 4;
                  std::vector<char> wide(static_cast<size_t>(rows * (codes + 8)));
                  for (int64_t r = 0; r < rows; ++r) {
                    const char* row = bytes->data() + r * row_bytes;
                    char* out = wide.data() + r * (codes + 8);
                    std::memcpy(out, row, static_cast<size_t>(codes));
                    for (int i = 0; i < 2; ++i) {
                      uint16_t bits;
                      std::memcpy(&bits, row + codes + 2 * i, sizeof bits);
                      const float value = half_bits::Fp16Widen(bits);
                      std::memcpy(out + codes + 4 * i, &value, sizeof value);
                    }
                  }
                  *bytes = std::move(wide);
                  (*shape)[1] = codes + 8;
                });
  testing::ExpectError([&] { Engine::FromCheckpoint(path); }, StatusCode::kFailedPrecondition,
                       "table \"t1\" (INT8) has rows with an fp32 scale and bias, the layout of "
                       "older exports; this build reads fp16 ones: export the model again");
}

TEST(ServingExport, QuantizedTablesAreRefusedWhereTheyCannotBeHeldAndCountedAsCodes) {
  const std::string dir = testing::TempDir("serving_export_quantized_config");
  auto expect_invalid = [](const config::DlrmConfig& c, const std::string& what) {
    testing::ExpectError([&] { Engine engine(c); }, StatusCode::kInvalidArgument, what);
  };
  config::DlrmConfig c = Config(dir);
  c.mutable_model()->mutable_tables(1)->set_precision(kInt8);
  expect_invalid(c, "model.tables[1].ssd is set but model.tables[1].precision is INT8");
  c = ParseConfigText(testing::SmallConfigText());
  c.mutable_model()->mutable_tables(1)->set_precision(kInt4);
  // The CUDA backend pools quantized tables (cuda_backend_test predicts with them on the
  // GPU); the parts that train them refuse them.
  testing::ExpectError(
      [&] { RequireFixedTables(c.model(), "distributed training (embedding shards)"); },
      StatusCode::kInvalidArgument,
      "has precision INT4 (a quantized serving table), which distributed training");
  // A model whose FP32 tables exceed the memory limit fits it with INT8 tables.
  c.mutable_model()->mutable_tables(0)->set_num_rows(1000000);  // dim 4: 16 MB in FP32
  c.set_memory_limit_bytes(14000000);
  testing::ExpectError([&] { Engine engine(c); }, StatusCode::kResourceExhausted,
                       "the embedding tables 16000150");
  c.mutable_model()->mutable_tables(0)->set_precision(kInt8);  // 8 MB
  Engine int8(c);
  EXPECT_EQ(int8.GetTableStats("t0").memory_bytes, 1000000 * 8);
  std::vector<float> p(kBatch);
  int8.Predict(testing::SmallBatch(kBatch, 3).view(), p.data(), kBatch);
  for (const float v : p) EXPECT_TRUE(v > 0 && v < 1) << v;
  // A stateful sparse optimizer holds nothing for rows no update reaches (Adagrad would
  // be 16 bytes a row here, twice the codes), and the memory budget counts nothing.
  c.mutable_sparse_optimizer()->set_learning_rate(0.1f);
  c.mutable_sparse_optimizer()->mutable_adagrad();
  c.set_memory_limit_bytes(train::ModelMemoryBytes(c));
  EXPECT_LT(train::ModelMemoryBytes(c), 1000000 * 9);
  Engine adagrad(c);
  EXPECT_EQ(adagrad.GetTableStats("t0").memory_bytes, 1000000 * 8);
  EXPECT_EQ(adagrad.GetTableStats("t1").memory_bytes, 25 * 6);  // INT4
}

}  // namespace
}  // namespace dlrm

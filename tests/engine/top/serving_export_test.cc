// Serving export (issue 14): Engine::Export writes a compact read-only model (dense
// parameters, every table's weights, a DYNAMIC table's ids and rows; no optimizer or
// admission state) that Engine::FromCheckpoint loads and that predicts bitwise as the
// engine it came from, an SSD table's rows included. Damaged or misused files are refused
// naming what is wrong.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "engine/checkpoint/checkpoint_file.h"
#include "engine/checkpoint/codec.h"
#include "engine/config/config.h"
#include "engine/core/status.h"
#include "engine/embedding/dynamic_rows.h"
#include "engine/engine.h"
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
  t1->mutable_ssd()->set_cache_bytes(SsdCacheBytes(c, t1->dim(), 12));
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

// Rewrites the serving model at path with tensor `name` replaced by `values` (INT64).
void ReplaceIds(const std::string& path, const std::string& name, std::vector<int64_t> values) {
  const CheckpointReader reader(path);
  CheckpointWriter writer;
  for (const auto& [key, value] : reader.metadata()) writer.SetMetadata(key, value);
  for (const std::string& tensor : reader.TensorNames()) {
    const std::vector<int64_t> shape = reader.TensorShape(tensor);
    int64_t n = 1;
    for (const int64_t d : shape) n *= d;
    if (tensor.rfind("dynamic.", 0) == 0) {
      std::vector<int64_t> data(static_cast<size_t>(n));
      reader.ReadTensor(tensor, checkpoint::TensorEntry::INT64, shape, data.data());
      if (tensor == name) data = values;
      writer.AddTensorCopy(tensor, checkpoint::TensorEntry::INT64,
                           {static_cast<int64_t>(data.size())}, data.data(),
                           data.size() * sizeof(int64_t));
    } else {
      std::vector<float> data(static_cast<size_t>(n));
      reader.ReadTensor(tensor, checkpoint::TensorEntry::FLOAT32, shape, data.data());
      writer.AddTensorCopy(tensor, checkpoint::TensorEntry::FLOAT32, shape, data.data(),
                           data.size() * sizeof(float));
    }
  }
  writer.WriteAtomic(path);
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

}  // namespace
}  // namespace dlrm

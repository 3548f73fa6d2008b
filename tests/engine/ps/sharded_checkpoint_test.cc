// Sharded checkpoints: a shard store or dense state saved and loaded into fresh objects
// is bitwise the saved one and trains on exactly as the original; files of another owner,
// layout or kind, and damaged files, are refused without changing anything; the manifest
// round-trips and notices missing or altered files.
#include "engine/checkpoint/sharded_checkpoint.h"

#include <google/protobuf/util/message_differencer.h>
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "engine/checkpoint/checkpoint_file.h"
#include "engine/config/config.h"
#include "engine/core/philox.h"
#include "engine/core/status.h"
#include "engine/ps/shard_store_file.h"
#include "engine/shard/planner.h"
#include "tests/support/dist_config.h"
#include "tests/support/test_support.h"

namespace dlrm {
namespace {

using namespace ::dlrm::testing;  // the suites' shared helpers

namespace fs = std::filesystem;
using Type = config::ShardingConfig::Type;
constexpr int32_t kServers = 2;
constexpr int64_t kBatch = 8;

// The whole batch's update of one step: random weighted bags, random pooled gradients.
std::vector<ps::FeatureUpdate> MakeUpdates(const config::DlrmConfig& c, uint64_t salt) {
  std::vector<ps::FeatureUpdate> updates;
  const CounterRng rng(91, 3, salt);
  uint64_t k = 0;
  for (int f = 0; f < c.model().sparse_features_size(); ++f) {
    ps::FeatureUpdate u;
    u.feature = f;
    const auto& tc = c.model().tables(FindTable(c.model(), c.model().sparse_features(f).table()));
    for (int64_t b = 0; b < kBatch; ++b) {
      const auto len = static_cast<int32_t>(rng.Uniform(k++) * 4);
      u.lengths.push_back(len);
      for (int32_t i = 0; i < len; ++i) {
        u.ids.push_back(static_cast<int64_t>(rng.Uniform(k++) * tc.num_rows()));
        u.weights.push_back(static_cast<float>(0.5 + rng.Uniform(k++)));
      }
    }
    for (int64_t i = 0; i < kBatch * tc.dim(); ++i)
      u.d_pooled.push_back(static_cast<float>(rng.Normal(k++)));
    updates.push_back(std::move(u));
  }
  return updates;
}

void Train(const config::DlrmConfig& c, ps::EmbeddingShardStore* store, int64_t first,
           int64_t last) {
  for (int64_t step = first; step <= last; ++step) {
    const std::vector<ps::FeatureUpdate> global = MakeUpdates(c, static_cast<uint64_t>(step));
    std::vector<ps::FeatureUpdate> mine;
    for (int32_t f : store->features()) mine.push_back(global[f]);
    store->ApplyUpdate(mine, kBatch, 0.05f, step);
  }
}

// Every value a store holds (rows, widened where 16-bit, then optimizer state, shard by
// shard), for bitwise comparisons.
std::vector<std::vector<float>> Snapshot(ps::EmbeddingShardStore& store) {
  std::vector<std::vector<float>> out;
  for (int32_t i = 0; i < static_cast<int32_t>(store.shards().size()); ++i) {
    const EmbeddingTable<float>& table = store.shard_table(i);
    std::vector<float>& rows = out.emplace_back(table.num_rows() * table.dim());
    for (int64_t r = 0; r < table.num_rows(); ++r) table.ReadRow(r, rows.data() + r * table.dim());
    for (const auto& [name, buffer] : store.optimizer().StateBuffers(i)) out.push_back(*buffer);
  }
  return out;
}

std::vector<std::vector<float>> Snapshot(DlrmModel<float>& model,
                                         DenseOptimizer<float>& optimizer) {
  std::vector<std::vector<float>> out{model.dense_params()};
  for (const auto& [name, buffer] : optimizer.StateBuffers()) out.push_back(*buffer);
  return out;
}

bool BitwiseEqual(const std::vector<std::vector<float>>& a,
                  const std::vector<std::vector<float>>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].size() != b[i].size() ||
        std::memcmp(a[i].data(), b[i].data(), a[i].size() * sizeof(float)) != 0)
      return false;
  }
  return true;
}

// Runs fn, which must throw a dlrm::Error with this code and a message containing every
// needle.
template <typename Fn>
void ExpectError(Fn fn, StatusCode code, const std::vector<std::string>& needles) {
  try {
    fn();
    ADD_FAILURE() << "no error; expected " << StatusCodeName(code);
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    for (const std::string& needle : needles)
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos)
          << "'" << needle << "' not in: " << e.what();
  }
}

void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// The tensors a file of this store / model must hold, by the names the header documents.
struct TensorRef {
  std::vector<int64_t> shape;
  const float* data;
  size_t count;
};
using TensorMap = std::map<std::string, TensorRef>;

TensorMap StoreTensors(ps::EmbeddingShardStore& store) {
  TensorMap out;
  for (int32_t i = 0; i < static_cast<int32_t>(store.shards().size()); ++i) {
    const ps::ShardLocation& s = store.shards()[i];
    const EmbeddingTable<float>& t = store.shard_table(i);
    const std::string key = t.name() + ".rows_" + std::to_string(s.row_begin) + "_" +
                            std::to_string(s.row_end) + ".cols_" + std::to_string(s.col_begin) +
                            "_" + std::to_string(s.col_end);
    out["embedding." + key + ".weight"] = {
        {t.num_rows(), t.dim()}, t.data().data(), t.data().size()};
    for (const auto& [name, buffer] : store.optimizer().StateBuffers(i))
      out["sparse_optimizer/" + key + "/" + name] = {
          {static_cast<int64_t>(buffer->size())}, buffer->data(), buffer->size()};
  }
  return out;
}

TensorMap DenseTensors(DlrmModel<float>& model, DenseOptimizer<float>& optimizer) {
  TensorMap out;
  for (const DenseParamInfo& info : model.dense_param_infos())
    out[info.name] = {info.shape, model.dense_params().data() + info.offset, info.size};
  for (const auto& [name, buffer] : optimizer.StateBuffers())
    out["dense_optimizer/" + name] = {
        {static_cast<int64_t>(buffer->size())}, buffer->data(), buffer->size()};
  return out;
}

std::vector<std::string> Names(const TensorMap& tensors) {
  std::vector<std::string> names;
  for (const auto& [name, ref] : tensors) names.push_back(name);
  return names;
}

// Rewrites a valid checkpoint file (whose tensors must be exactly `tensors`) without the
// tensor `dropped`: its metadata (format, layout) still fits, so only the reads can notice.
void RewriteWithout(const std::string& path, const TensorMap& tensors, const std::string& dropped) {
  CheckpointWriter writer;
  {
    const CheckpointReader reader(path);
    ASSERT_EQ(reader.TensorNames(), Names(tensors));
    for (const auto& [key, value] : reader.metadata()) writer.SetMetadata(key, value);
  }
  ASSERT_EQ(tensors.count(dropped), 1u) << dropped;
  for (const auto& [name, t] : tensors) {
    if (name != dropped)
      writer.AddTensor(name, checkpoint::TensorEntry::FLOAT32, t.shape, t.data,
                       t.count * sizeof(float));
  }
  writer.WriteAtomic(path);
}

struct Case {
  Type type;
  std::string optimizer;
  int32_t owner;
  config::TableConfig::Precision precision = config::TableConfig::FP32;
};

std::string CaseName(const Case& c) {
  std::string name = std::string(shard::ShardingTypeShortName(c.type)) + "_" + c.optimizer;
  if (c.precision != config::TableConfig::FP32)
    name += "_" + config::TableConfig::Precision_Name(c.precision);
  return name;
}

void PrintTo(const Case& c, std::ostream* os) { *os << CaseName(c) << " owner " << c.owner; }

class ShardStoreCheckpointTest : public ::testing::TestWithParam<Case> {};

TEST_P(ShardStoreCheckpointTest, RoundTripIsBitwiseAndResumesIdentically) {
  const Case& p = GetParam();
  const config::DlrmConfig c =
      WithTablePrecision(ShardedTestConfig(p.type, "sgd", p.optimizer, kServers), p.precision);
  const shard::ShardingPlan plan = shard::PlanSharding(c, kServers);
  ps::EmbeddingShardStore saved(c, plan, p.owner);
  ASSERT_FALSE(saved.shards().empty());
  Train(c, &saved, 1, 3);
  const std::string path = testing::TempDir("ckpt_roundtrip") + "/store";
  ps::SaveShardStore(saved, p.owner, 3, path);

  ps::EmbeddingShardStore restored(c, plan, p.owner);
  // The updates did change rows and state, so equality below means something.
  ASSERT_FALSE(BitwiseEqual(Snapshot(saved), Snapshot(restored)));
  EXPECT_EQ(ps::LoadShardStore(&restored, p.owner, path), 3);
  ASSERT_TRUE(BitwiseEqual(Snapshot(saved), Snapshot(restored)));

  // Resuming: the same further steps give the same bits (the optimizer state is live).
  Train(c, &saved, 4, 5);
  Train(c, &restored, 4, 5);
  EXPECT_TRUE(BitwiseEqual(Snapshot(saved), Snapshot(restored)));
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, ShardStoreCheckpointTest,
    ::testing::Values(
        Case{config::ShardingConfig::ROW_WISE, "rowwise_adagrad", 0},
        Case{config::ShardingConfig::ROW_WISE, "adam", 1},
        Case{config::ShardingConfig::COLUMN_WISE, "adam", 0},
        Case{config::ShardingConfig::TABLE_ROW_WISE, "adagrad", 1},
        Case{config::ShardingConfig::DATA_PARALLEL, "rowwise_adagrad", ps::kTrainerReplica},
        Case{config::ShardingConfig::COLUMN_WISE, "adagrad", 1, config::TableConfig::BF16},
        Case{config::ShardingConfig::ROW_WISE, "rowwise_adagrad", 0, config::TableConfig::FP16}),
    [](const ::testing::TestParamInfo<Case>& info) { return CaseName(info.param); });

// A trained store of server 0 and its file, and a second store that loads must not change.
struct StoreErrorsTest : ::testing::Test {
  const config::DlrmConfig c =
      ShardedTestConfig(config::ShardingConfig::ROW_WISE, "sgd", "rowwise_adagrad", kServers);
  const shard::ShardingPlan plan = shard::PlanSharding(c, kServers);
  const std::string dir = testing::TempDir("ckpt_store_errors");
  const std::string path = dir + "/" + checkpoint::ServerShardFile(0);

  void SetUp() override {
    ps::EmbeddingShardStore saved(c, plan, 0);
    Train(c, &saved, 1, 2);
    ps::SaveShardStore(saved, 0, 2, path);
  }

  // target trained for one step (so it differs from the file and from a fresh store);
  // loading path into it must fail with code and needles, leaving it as it was.
  void ExpectRefused(ps::EmbeddingShardStore* target, int32_t owner, const std::string& file,
                     StatusCode code, const std::vector<std::string>& needles) {
    Train(c, target, 1, 1);
    const auto before = Snapshot(*target);
    ExpectError([&] { ps::LoadShardStore(target, owner, file); }, code, needles);
    EXPECT_TRUE(BitwiseEqual(before, Snapshot(*target))) << "a refused load changed the store";
  }
};

TEST_F(StoreErrorsTest, FileOfAnotherOwnerIsRefused) {
  ps::EmbeddingShardStore other(c, plan, 1);
  ExpectRefused(&other, 1, path, StatusCode::kFailedPrecondition, {"owner 0", "server 1"});
}

TEST_F(StoreErrorsTest, OwnerArgumentMustBeTheStoresOwner) {
  ps::EmbeddingShardStore other(c, plan, 1);
  ExpectRefused(&other, 0, path, StatusCode::kInvalidArgument, {"server 1", "server 0"});
  ExpectError([&] { ps::SaveShardStore(other, 0, 1, dir + "/x"); }, StatusCode::kInvalidArgument,
              {"server 1"});
}

TEST_F(StoreErrorsTest, FileOfAnotherPlanIsRefused) {
  // Three servers: server 0 holds other row ranges of the same tables.
  const config::DlrmConfig c3 =
      ShardedTestConfig(config::ShardingConfig::ROW_WISE, "sgd", "rowwise_adagrad", 3);
  ps::EmbeddingShardStore other(c3, shard::PlanSharding(c3, 3), 0);
  ExpectRefused(&other, 0, path, StatusCode::kFailedPrecondition, {"shard.0", "rows ["});
}

TEST_F(StoreErrorsTest, FileOfAnotherOptimizerIsRefused) {
  const config::DlrmConfig adam =
      ShardedTestConfig(config::ShardingConfig::ROW_WISE, "sgd", "adam", kServers);
  ps::EmbeddingShardStore other(adam, plan, 0);
  ExpectRefused(&other, 0, path, StatusCode::kFailedPrecondition,
                {"optimizer_state", "[row_sum_sq]", "[exp_avg, exp_avg_sq]"});
}

// FP32 rows into a store of BF16 rows (another layout: the shard's precision is named),
// and BF16 rows into the FP32 store.
TEST_F(StoreErrorsTest, FileOfAnotherTablePrecisionIsRefused) {
  const config::DlrmConfig bf16 = WithTablePrecision(c, config::TableConfig::BF16);
  ps::EmbeddingShardStore half(bf16, plan, 0);
  ExpectRefused(&half, 0, path, StatusCode::kFailedPrecondition, {"shard.0", "BF16"});
  ps::SaveShardStore(half, 0, 1, dir + "/bf16");
  ps::EmbeddingShardStore target(c, plan, 0);
  ExpectRefused(&target, 0, dir + "/bf16", StatusCode::kFailedPrecondition, {"shard.0", "BF16"});
}

TEST_F(StoreErrorsTest, FileOfAnotherKindIsRefused) {
  const config::DlrmConfig dc =
      ShardedTestConfig(config::ShardingConfig::ROW_WISE, "adam", "rowwise_adagrad", kServers);
  DlrmModel<float> model(dc, nullptr, false);
  auto optimizer = MakeDenseOptimizer<float>(dc.dense_optimizer(), model.dense_params().size());
  checkpoint::SaveDenseState(model, *optimizer, 2, dir + "/dense");
  ps::EmbeddingShardStore target(c, plan, 0);
  ExpectRefused(&target, 0, dir + "/dense", StatusCode::kFailedPrecondition,
                {"libdlrm.dense_state.v1", "libdlrm.shard_store.v1"});
  EXPECT_THROW(checkpoint::LoadDenseState(&model, optimizer.get(), path), Error);
}

TEST_F(StoreErrorsTest, TruncatedFileIsDataLoss) {
  const std::string bytes = testing::FileContents(path);
  ps::EmbeddingShardStore target(c, plan, 0);
  for (const size_t keep : {size_t{0}, size_t{20}, bytes.size() / 2, bytes.size() - 1}) {
    WriteBytes(dir + "/short", bytes.substr(0, keep));
    ExpectRefused(&target, 0, dir + "/short", StatusCode::kDataLoss, {"truncated"});
  }
}

TEST_F(StoreErrorsTest, CorruptedFileIsDataLoss) {
  std::string bytes = testing::FileContents(path);
  bytes[bytes.size() / 2] ^= 0x10;  // inside the payload: a row value
  WriteBytes(dir + "/flipped", bytes);
  ps::EmbeddingShardStore target(c, plan, 0);
  ExpectRefused(&target, 0, dir + "/flipped", StatusCode::kDataLoss, {"checksum"});
}

TEST_F(StoreErrorsTest, MissingLastTensorLeavesEveryShardUnchanged) {
  // Every shard but the last is read (staged) before the missing tensor is noticed.
  ps::EmbeddingShardStore saved(c, plan, 0);
  Train(c, &saved, 1, 2);
  const TensorMap tensors = StoreTensors(saved);
  const auto last = static_cast<int32_t>(saved.shards().size()) - 1;
  ASSERT_GT(last, 0);
  std::string dropped;
  for (const auto& [name, t] : tensors) {
    if (name.find("/row_sum_sq") != std::string::npos &&
        name.find(saved.shard_table(last).name() + ".rows_" +
                  std::to_string(saved.shards()[last].row_begin) + "_") != std::string::npos)
      dropped = name;
  }
  ASSERT_FALSE(dropped.empty());
  RewriteWithout(path, tensors, dropped);
  ps::EmbeddingShardStore target(c, plan, 0);
  ExpectRefused(&target, 0, path, StatusCode::kNotFound, {dropped});
}

TEST_F(StoreErrorsTest, UnknownTensorIsRefused) {
  // A file with a tensor this store would not restore (state it would silently drop).
  CheckpointWriter writer;
  const float extra[2] = {1, 2};
  {
    const CheckpointReader reader(path);
    for (const auto& [key, value] : reader.metadata()) writer.SetMetadata(key, value);
  }
  ps::EmbeddingShardStore saved(c, plan, 0);
  Train(c, &saved, 1, 2);
  for (const auto& [name, t] : StoreTensors(saved))
    writer.AddTensor(name, checkpoint::TensorEntry::FLOAT32, t.shape, t.data,
                     t.count * sizeof(float));
  writer.AddTensor("sparse_optimizer/extra", checkpoint::TensorEntry::FLOAT32, {2}, extra,
                   sizeof(extra));
  writer.WriteAtomic(path);
  ps::EmbeddingShardStore target(c, plan, 0);
  ExpectRefused(&target, 0, path, StatusCode::kFailedPrecondition, {"sparse_optimizer/extra"});
}

// ---- dense state -----------------------------------------------------------------------

// A dense model and optimizer of the test config, after `steps` optimizer updates with
// gradients of this salt.
struct Dense {
  DlrmModel<float> model;
  std::unique_ptr<DenseOptimizer<float>> optimizer;

  Dense(const config::DlrmConfig& c, int steps, uint64_t salt)
      : model(c, nullptr, false),
        optimizer(MakeDenseOptimizer<float>(c.dense_optimizer(), model.dense_params().size())) {
    const size_t n = model.dense_params().size();
    const CounterRng rng(17, 4, salt);
    std::vector<float> grad(n);
    for (int step = 1; step <= steps; ++step) {
      for (size_t i = 0; i < n; ++i) grad[i] = static_cast<float>(rng.Normal(step * n + i));
      optimizer->Update(model.dense_params().data(), grad.data(), 0, n, 0.05f, step);
    }
  }
  std::vector<std::vector<float>> Snapshot() { return ::dlrm::Snapshot(model, *optimizer); }
};

// A whole table saved by one server restores onto shards of one column (dim 8 over 8
// servers): each takes its own column of the weights and of every per-element state, as
// a wider column block does (a width of 1 once read as a row-wise state: SGD's shards
// took the piece's first column, Adagrad's were refused).
TEST(ShardStoreReshard, OneColumnShardsTakeTheirColumnOfWeightsAndState) {
  for (const std::string sparse : {"sgd", "adagrad", "adam"}) {
    const config::DlrmConfig c =
        ShardedTestConfig(config::ShardingConfig::TABLE_WISE, "sgd", sparse, 1);
    const shard::ShardingPlan whole = shard::PlanSharding(c, 1);
    const std::string dir = TempDir("one_column_" + sparse);
    ps::EmbeddingShardStore saved(c, whole, 0);
    Train(c, &saved, 1, 2);
    ps::SaveShardStore(saved, 0, 2, dir + "/" + checkpoint::ServerShardFile(0));
    checkpoint::CheckpointManifest manifest;
    manifest.set_step(2);
    *manifest.mutable_plan() = whole;
    config::DlrmConfig by_column =
        ShardedTestConfig(config::ShardingConfig::COLUMN_WISE, "sgd", sparse, 8);
    by_column.mutable_sharding()->set_min_column_block(1);
    const shard::ShardingPlan columns = shard::PlanSharding(by_column, 8);
    for (int32_t server = 0; server < 8; ++server) {
      ps::EmbeddingShardStore store(by_column, columns, server);
      ps::LoadReshardedStore(&store, dir, manifest, c.model());
      for (int32_t i = 0; i < static_cast<int32_t>(store.shards().size()); ++i) {
        const ps::ShardLocation& at = store.shards()[static_cast<size_t>(i)];
        ASSERT_EQ(at.col_end - at.col_begin, 1) << sparse << " server " << server;
        const std::string where = sparse + " table " + std::to_string(at.table) + " column " +
                                  std::to_string(at.col_begin);
        std::vector<float> want = saved.shard_table(at.table).data();  // saved shard t: table t
        for (int64_t r = 0; r < at.row_end; ++r)
          EXPECT_EQ(store.shard_table(i).data()[static_cast<size_t>(r)],
                    want[static_cast<size_t>(r * 8 + at.col_begin)])
              << where << " row " << r;
        const auto state = store.optimizer().StateBuffers(i);
        const auto saved_state = saved.optimizer().StateBuffers(at.table);
        for (size_t k = 0; k < state.size(); ++k)
          for (int64_t r = 0; r < at.row_end; ++r)
            EXPECT_EQ((*state[k].second)[static_cast<size_t>(r)],
                      (*saved_state[k].second)[static_cast<size_t>(r * 8 + at.col_begin)])
                << where << " " << state[k].first << " row " << r;
      }
    }
  }
}

config::DlrmConfig DenseConfig(const std::string& dense_optimizer) {
  return ShardedTestConfig(config::ShardingConfig::ROW_WISE, dense_optimizer, "sgd", kServers);
}

TEST(DenseStateTest, RoundTripIsBitwise) {
  for (const char* kind : {"sgd", "adagrad", "adam"}) {
    SCOPED_TRACE(kind);
    const config::DlrmConfig c = DenseConfig(kind);
    Dense saved(c, 3, 1);
    const std::string path = testing::TempDir("ckpt_dense") + "/" + checkpoint::kDenseStateFile;
    checkpoint::SaveDenseState(saved.model, *saved.optimizer, 3, path);
    // Engine::Save's names for the parameters.
    const CheckpointReader reader(path);
    EXPECT_TRUE(reader.HasTensor("bottom_mlp.0.weight"));
    EXPECT_TRUE(reader.HasTensor("top_mlp.1.bias"));
    EXPECT_EQ(reader.HasTensor("dense_optimizer/exp_avg_sq"), std::string(kind) == "adam");

    Dense restored(c, 0, 0);
    ASSERT_FALSE(BitwiseEqual(saved.Snapshot(), restored.Snapshot()));
    EXPECT_EQ(checkpoint::LoadDenseState(&restored.model, restored.optimizer.get(), path), 3);
    EXPECT_TRUE(BitwiseEqual(saved.Snapshot(), restored.Snapshot()));
  }
}

TEST(DenseStateTest, MismatchesAndDamageChangeNothing) {
  const std::string dir = testing::TempDir("ckpt_dense_errors");
  const std::string path = dir + "/" + checkpoint::kDenseStateFile;
  const config::DlrmConfig c = DenseConfig("adam");
  Dense saved(c, 3, 1);
  checkpoint::SaveDenseState(saved.model, *saved.optimizer, 3, path);

  auto expect_refused = [&](Dense* target, const std::string& file, StatusCode code,
                            const std::vector<std::string>& needles) {
    const auto before = target->Snapshot();
    ExpectError([&] { checkpoint::LoadDenseState(&target->model, target->optimizer.get(), file); },
                code, needles);
    EXPECT_TRUE(BitwiseEqual(before, target->Snapshot())) << "a refused load changed state";
  };

  // Another optimizer kind.
  Dense adagrad(DenseConfig("adagrad"), 1, 2);
  expect_refused(&adagrad, path, StatusCode::kFailedPrecondition,
                 {"dense_optimizer_state", "[exp_avg, exp_avg_sq]", "[sum_sq]"});
  // Another shape of a parameter.
  config::DlrmConfig wider = c;
  wider.mutable_model()->mutable_bottom_mlp()->set_layer_sizes(0, 12);
  Dense other(wider, 1, 2);
  expect_refused(&other, path, StatusCode::kFailedPrecondition,
                 {"dense_param.0", "bottom_mlp.0.weight [16, 4]", "[12, 4]"});

  Dense target(c, 1, 2);
  // Truncated, corrupted.
  const std::string bytes = testing::FileContents(path);
  WriteBytes(dir + "/short", bytes.substr(0, bytes.size() - 10));
  expect_refused(&target, dir + "/short", StatusCode::kDataLoss, {"truncated"});
  std::string flipped = bytes;
  flipped[bytes.size() - 100] ^= 1;
  WriteBytes(dir + "/flipped", flipped);
  expect_refused(&target, dir + "/flipped", StatusCode::kDataLoss, {"checksum"});
  // The last tensor read (Adam's second moment) missing: the parameters were staged.
  RewriteWithout(path, DenseTensors(saved.model, *saved.optimizer), "dense_optimizer/exp_avg_sq");
  expect_refused(&target, path, StatusCode::kNotFound, {"dense_optimizer/exp_avg_sq"});
  expect_refused(&target, dir + "/absent", StatusCode::kIo, {"absent"});
}

// ---- manifest --------------------------------------------------------------------------

// A complete checkpoint directory of a 2-server ROW_WISE run at step 2.
struct ManifestTest : ::testing::Test {
  const config::DlrmConfig c =
      ShardedTestConfig(config::ShardingConfig::ROW_WISE, "adam", "adam", kServers);
  const shard::ShardingPlan plan = shard::PlanSharding(c, kServers);
  const std::string dir = testing::TempDir("ckpt_manifest");
  checkpoint::CheckpointManifest manifest;

  void SetUp() override {
    manifest.set_step(2);
    manifest.set_config(ConfigToText(c));
    *manifest.mutable_plan() = plan;
    manifest.set_num_trainers(2);
    manifest.set_num_servers(kServers);
    manifest.set_staleness(1);
    for (int32_t server = 0; server < kServers; ++server) {
      ps::EmbeddingShardStore store(c, plan, server);
      Train(c, &store, 1, 2);
      ps::SaveShardStore(store, server, 2, dir + "/" + checkpoint::ServerShardFile(server));
      checkpoint::ServerShardsEntry* entry = manifest.add_servers();
      entry->set_server(server);
      *entry->mutable_file() = checkpoint::DescribeFile(dir, checkpoint::ServerShardFile(server));
    }
    Dense dense(c, 2, 1);
    checkpoint::SaveDenseState(dense.model, *dense.optimizer, 2,
                               dir + "/" + checkpoint::kDenseStateFile);
    *manifest.mutable_dense_state() = checkpoint::DescribeFile(dir, checkpoint::kDenseStateFile);
    checkpoint::WriteManifest(dir, manifest);
  }
};

TEST_F(ManifestTest, FileNames) {
  EXPECT_EQ(checkpoint::ServerShardFile(3), "server-00003.shards");
  EXPECT_EQ(checkpoint::ServerShardFile(12345), "server-12345.shards");
  EXPECT_EQ(std::string(checkpoint::kDenseStateFile), "trainer.dense");
  EXPECT_EQ(std::string(checkpoint::kManifestFile), "MANIFEST");
}

TEST_F(ManifestTest, RoundTripsAndRecordsRealSizesAndChecksums) {
  const checkpoint::CheckpointManifest read = checkpoint::ReadManifest(dir);
  std::string diff;
  google::protobuf::util::MessageDifferencer differ;
  differ.ReportDifferencesToString(&diff);
  EXPECT_TRUE(differ.Compare(manifest, read)) << diff;
  EXPECT_EQ(read.step(), 2);
  EXPECT_EQ(read.staleness(), 1);
  EXPECT_EQ(read.plan().shards_size(), plan.shards_size());
  const std::string bytes = testing::FileContents(dir + "/" + checkpoint::ServerShardFile(1));
  EXPECT_EQ(read.servers(1).file().name(), "server-00001.shards");
  EXPECT_EQ(read.servers(1).file().num_bytes(), bytes.size());
  EXPECT_EQ(read.servers(1).file().crc32c(), Crc32c(0, bytes.data(), bytes.size()));
  // The restore a server would run from it.
  ps::EmbeddingShardStore store(c, plan, 1);
  EXPECT_EQ(ps::LoadShardStore(&store, 1, dir + "/" + read.servers(1).file().name()), 2);
}

TEST_F(ManifestTest, NoManifestMeansIncomplete) {
  fs::remove(dir + "/" + checkpoint::kManifestFile);
  ExpectError([&] { checkpoint::ReadManifest(dir); }, StatusCode::kNotFound,
              {"MANIFEST", "incomplete"});
}

TEST_F(ManifestTest, MissingFileIsDataLossNamingIt) {
  fs::remove(dir + "/" + checkpoint::ServerShardFile(1));
  ExpectError([&] { checkpoint::ReadManifest(dir); }, StatusCode::kDataLoss,
              {"server-00001.shards", "missing"});
}

TEST_F(ManifestTest, AlteredFileIsDataLossNamingIt) {
  const std::string file = dir + "/" + checkpoint::kDenseStateFile;
  std::string bytes = testing::FileContents(file);
  bytes[bytes.size() / 2] ^= 4;  // same size, other content
  WriteBytes(file, bytes);
  ExpectError([&] { checkpoint::ReadManifest(dir); }, StatusCode::kDataLoss,
              {"trainer.dense", "CRC32C"});
  WriteBytes(file, bytes + "x");
  ExpectError([&] { checkpoint::ReadManifest(dir); }, StatusCode::kDataLoss,
              {"trainer.dense", std::to_string(bytes.size() + 1) + " bytes"});
}

TEST_F(ManifestTest, InconsistentManifestIsDataLoss) {
  checkpoint::CheckpointManifest bad = manifest;
  bad.mutable_servers(0)->set_server(1);
  checkpoint::WriteManifest(dir, bad);
  ExpectError([&] { checkpoint::ReadManifest(dir); }, StatusCode::kDataLoss,
              {"server 1 at position 0"});
  bad = manifest;
  bad.set_num_servers(3);
  checkpoint::WriteManifest(dir, bad);
  ExpectError([&] { checkpoint::ReadManifest(dir); }, StatusCode::kDataLoss,
              {"2 server files for 3"});
  bad = manifest;
  bad.mutable_dense_state()->set_name("../trainer.dense");
  checkpoint::WriteManifest(dir, bad);
  ExpectError([&] { checkpoint::ReadManifest(dir); }, StatusCode::kDataLoss, {"../trainer.dense"});
  bad = manifest;
  bad.set_step(-1);
  EXPECT_THROW(checkpoint::WriteManifest(dir, bad), Error);
  // A damaged MANIFEST itself.
  checkpoint::WriteManifest(dir, manifest);
  std::string bytes = testing::FileContents(dir + "/" + checkpoint::kManifestFile);
  bytes[bytes.size() / 2] ^= 1;
  WriteBytes(dir + "/" + checkpoint::kManifestFile, bytes);
  ExpectError([&] { checkpoint::ReadManifest(dir); }, StatusCode::kDataLoss, {"MANIFEST"});
}

}  // namespace
}  // namespace dlrm

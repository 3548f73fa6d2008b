// The pooled all-to-all layout (engine/shard/pooled_layout.h), the Neo layout's exchange,
// run on the CPU: three ranks simulated in one process, their all-to-alls done by moving
// the buffers. Each owner pools its shards (whole tables, column blocks) over the joined
// global batch and applies the fused backward + optimizer to its shards; every rank's
// assembled pooled rows, and every shard after two steps, must equal one process's bit for
// bit. Plans it cannot exchange and malformed parts are refused naming what is wrong.
#include "engine/shard/pooled_layout.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "engine/config/config.h"
#include "engine/core/philox.h"
#include "engine/core/status.h"
#include "engine/embedding/embedding_bag.h"
#include "engine/embedding/embedding_table.h"
#include "engine/embedding/sparse_optimizer.h"
#include "engine/shard/planner.h"

namespace dlrm::shard {
namespace {

using ::testing::HasSubstr;
using Type = config::ShardingConfig::Type;

constexpr int32_t kWorld = 3;
constexpr int64_t kPerRank = 5;
constexpr int64_t kGlobal = kWorld * kPerRank;
constexpr uint64_t kSeed = 7;

// t0 is cut into two column blocks, t2 is replicated, two features share t0.
std::string ConfigText(const std::string& optimizer) {
  return R"(model {
  num_dense_features: 1
  tables { name: "t0" num_rows: 50 dim: 8 }
  tables { name: "t1" num_rows: 30 dim: 6 }
  tables { name: "t2" num_rows: 20 dim: 4 }
  tables { name: "t3" num_rows: 40 dim: 5 }
  sparse_features { name: "f0" table: "t0" }
  sparse_features { name: "f1" table: "t1" pooling: MEAN }
  sparse_features { name: "f2" table: "t0" }
  sparse_features { name: "f3" table: "t2" }
  sparse_features { name: "f4" table: "t3" pooling: MEAN }
  interaction: CAT
  bottom_mlp { layer_sizes: 4 }
  top_mlp { layer_sizes: 1 }
}
sparse_optimizer { )" +
         optimizer + " learning_rate: 0.1 }\n";
}

TableShard Shard(const config::DlrmConfig& config, int32_t t, Type type, int32_t server,
                 int32_t col_begin, int32_t col_end) {
  TableShard s;
  s.set_table(config.model().tables(t).name());
  s.set_table_index(t);
  s.set_type(type);
  if (type != config::ShardingConfig::DATA_PARALLEL) s.set_server(server);
  s.set_row_begin(0);
  s.set_row_end(config.model().tables(t).num_rows());
  s.set_col_begin(col_begin);
  s.set_col_end(col_end);
  return s;
}

ShardingPlan Plan(const config::DlrmConfig& config) {
  ShardingPlan plan;
  plan.set_num_servers(kWorld);
  *plan.add_shards() = Shard(config, 0, config::ShardingConfig::COLUMN_WISE, 2, 0, 3);
  *plan.add_shards() = Shard(config, 0, config::ShardingConfig::COLUMN_WISE, 0, 3, 8);
  *plan.add_shards() = Shard(config, 1, config::ShardingConfig::TABLE_WISE, 1, 0, 6);
  *plan.add_shards() = Shard(config, 2, config::ShardingConfig::DATA_PARALLEL, -1, 0, 4);
  *plan.add_shards() = Shard(config, 3, config::ShardingConfig::TABLE_WISE, 0, 0, 5);
  return plan;
}

int64_t RowsOf(const config::DlrmConfig& config, int32_t feature) {
  const std::string& table = config.model().sparse_features(feature).table();
  for (const auto& t : config.model().tables())
    if (t.name() == table) return t.num_rows();
  return 0;
}

// A weighted global batch with empty bags and repeated ids (few rows).
OwnedBatch GlobalBatch(const config::DlrmConfig& config, uint64_t salt) {
  const CounterRng rng(salt, 3, 0);
  uint64_t draw = 0;
  OwnedBatch b;
  b.batch_size = kGlobal;
  b.num_sparse = config.model().sparse_features_size();
  for (int32_t f = 0; f < b.num_sparse; ++f)
    for (int64_t i = 0; i < kGlobal; ++i) {
      const auto len = static_cast<int32_t>(rng.Uniform(draw++) * 5);  // 0..4
      b.lengths.push_back(len);
      for (int32_t k = 0; k < len; ++k) {
        b.ids.push_back(static_cast<int64_t>(rng.Uniform(draw++) * RowsOf(config, f)));
        b.weights.push_back(static_cast<float>(0.5 + rng.Uniform(draw++)));
      }
    }
  return b;
}

std::vector<float> Gradient(size_t n, uint64_t salt) {
  const CounterRng rng(salt, 4, 0);
  std::vector<float> g(n);
  for (size_t i = 0; i < n; ++i) g[i] = static_cast<float>(rng.Uniform(i) - 0.5);
  return g;
}

// The pooling and the fused backward + optimizer over some tables, as one process or one
// rank runs them. Held by pointer: the bags borrow `tables`.
struct Pooler {
  std::vector<EmbeddingTable<float>> tables;
  std::vector<FeatureBinding> bindings;
  std::vector<SparseFeatureSpec> specs;  // one per batch feature
  int32_t width = 0;
  std::unique_ptr<EmbeddingBagCollection<float>> bags;
  std::unique_ptr<SparseOptimizer<float>> optimizer;

  void Finish(const config::DlrmConfig& config) {
    bags = std::make_unique<EmbeddingBagCollection<float>>(&tables, bindings, width);
    std::vector<TableShape> shapes;
    for (const auto& t : tables) shapes.push_back({t.num_rows(), t.dim()});
    optimizer = MakeSparseOptimizer<float>(config.sparse_optimizer(), shapes);
  }
  std::vector<float> Forward(const ValidatedBatch& vb) const {
    std::vector<float> out(static_cast<size_t>(vb.view.batch_size) * width);
    bags->Forward(vb, 0, vb.view.batch_size, out.data());
    return out;
  }
  ValidatedBatch Validate(const OwnedBatch& batch) const {
    return ValidateBatch(batch.view(), 0, specs, false);
  }
};

std::unique_ptr<Pooler> WholeModel(const config::DlrmConfig& config) {
  auto owned = std::make_unique<Pooler>();
  Pooler& p = *owned;
  for (int32_t t = 0; t < config.model().tables_size(); ++t) {
    const auto& tc = config.model().tables(t);
    p.tables.emplace_back(tc.name(), tc.num_rows(), tc.dim());
    p.tables.back().Initialize(tc.initializer(), kSeed, t);
  }
  for (int32_t f = 0; f < config.model().sparse_features_size(); ++f) {
    const auto& fc = config.model().sparse_features(f);
    int32_t t = 0;
    while (config.model().tables(t).name() != fc.table()) ++t;
    p.bindings.push_back({t, p.width, fc.pooling() == config::SparseFeatureConfig::MEAN});
    p.specs.push_back({t, config.model().tables(t).num_rows()});
    p.width += config.model().tables(t).dim();
  }
  p.Finish(config);
  return owned;
}

// The shards and slices of one rank (or the replicated ones), initialized as the whole
// tables are.
std::unique_ptr<Pooler> Shards(const config::DlrmConfig& config,
                               const std::vector<OwnedShard>& shards,
                               const std::vector<PooledSlice>& slices, int32_t width) {
  auto owned = std::make_unique<Pooler>();
  Pooler& p = *owned;
  for (const OwnedShard& s : shards) {
    const auto& tc = config.model().tables(s.table);
    p.tables.emplace_back(tc.name(), tc.num_rows(), s.width());
    p.tables.back().InitializeShard(tc.initializer(), kSeed, s.table, tc.num_rows(), 0,
                                    s.col_begin);
  }
  for (const PooledSlice& s : slices) {
    p.bindings.push_back({s.shard, s.owned_column, s.mean});
    p.specs.push_back({s.shard, p.tables[s.shard].num_rows()});
  }
  p.width = width;
  p.Finish(config);
  return owned;
}

// Rows [q * b, (q + 1) * b) of a [B x width] array.
std::vector<float> RowsOfRank(const std::vector<float>& all, int32_t q, int64_t b, int32_t width) {
  return {all.begin() + q * b * width, all.begin() + (q + 1) * b * width};
}

void ExpectBitwise(const std::vector<float>& got, const std::vector<float>& want,
                   const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0) << what;
}

// Every shard's weights against the same columns of the whole table.
void ExpectShardsEqualTables(const Pooler& whole, const Pooler& rank,
                             const std::vector<OwnedShard>& shards, const std::string& who) {
  for (size_t k = 0; k < shards.size(); ++k) {
    const OwnedShard& s = shards[k];
    const EmbeddingTable<float>& full = whole.tables[s.table];
    std::vector<float> columns;
    for (int64_t r = 0; r < full.num_rows(); ++r)
      columns.insert(columns.end(), full.row(r) + s.col_begin, full.row(r) + s.col_end);
    ExpectBitwise(rank.tables[k].data(), columns, who + " shard " + std::to_string(k));
  }
}

// One global step over the simulated ranks; checks the pooled rows of every rank.
void DistributedStep(const PooledLayout& layout, const OwnedBatch& global,
                     const std::vector<float>& pooled_want, const std::vector<float>& d_pooled,
                     const std::vector<std::unique_ptr<Pooler>>& owners, Pooler& replica,
                     int64_t step) {
  const int64_t b = layout.SamplesPerRank(global.batch_size);
  std::vector<std::vector<OwnedBatch>> parts;  // [from][to]
  std::vector<OwnedBatch> local_inputs;
  for (int32_t q = 0; q < kWorld; ++q) {
    const OwnedBatch local = SliceBatch(global.view(), q * b, (q + 1) * b);
    parts.push_back(layout.SplitInput(local.view()));
    local_inputs.push_back(layout.LocalInput(local.view()));
  }
  std::vector<ValidatedBatch> joined_vb;
  std::vector<OwnedBatch> joined(kWorld);
  std::vector<std::vector<float>> owner_out;
  for (int32_t r = 0; r < kWorld; ++r) {
    std::vector<OwnedBatch> to_r;
    for (int32_t q = 0; q < kWorld; ++q) to_r.push_back(parts[q][r]);
    joined[r] = layout.JoinInput(r, to_r);
    joined_vb.push_back(owners[r]->Validate(joined[r]));
    owner_out.push_back(owners[r]->Forward(joined_vb.back()));
  }
  std::vector<std::vector<std::vector<float>>> back(kWorld);  // [from q][to r]
  std::vector<float> replica_grad;
  for (int32_t q = 0; q < kWorld; ++q) {
    std::vector<std::vector<float>> blocks;
    for (int32_t r = 0; r < kWorld; ++r)
      blocks.push_back(RowsOfRank(owner_out[r], q, b, layout.owned_width(r)));
    std::vector<float> pooled(static_cast<size_t>(b) * layout.pooled_width(), -1.0f);
    const std::vector<float> local = replica.Forward(replica.Validate(local_inputs[q]));
    layout.Assemble(blocks, local, /*fetched=*/{}, b, pooled.data());
    ExpectBitwise(pooled, RowsOfRank(pooled_want, q, b, layout.pooled_width()),
                  "pooled rows of rank " + std::to_string(q));
    std::vector<float> local_grad;
    back[q] =
        layout.Split(RowsOfRank(d_pooled, q, b, layout.pooled_width()).data(), b, &local_grad);
    replica_grad.insert(replica_grad.end(), local_grad.begin(), local_grad.end());
  }
  for (int32_t r = 0; r < kWorld; ++r) {
    std::vector<float> grad;  // the blocks of ranks 0..W-1: [B x owned_width(r)]
    for (int32_t q = 0; q < kWorld; ++q)
      grad.insert(grad.end(), back[q][r].begin(), back[q][r].end());
    owners[r]->bags->BackwardAndUpdate(joined_vb[r], grad.data(), *owners[r]->optimizer, 0.1f, step,
                                       nullptr);
  }
  // The replicated table's gradient of every rank, over the whole batch (what a trainer
  // all-gathers): one update, as one process makes it.
  const OwnedBatch replica_input = layout.LocalInput(global.view());
  replica.bags->BackwardAndUpdate(replica.Validate(replica_input), replica_grad.data(),
                                  *replica.optimizer, 0.1f, step, nullptr);
}

class PooledLayoutStepTest : public ::testing::TestWithParam<const char*> {};

TEST_P(PooledLayoutStepTest, ThreeRanksPoolAndUpdateAsOneProcessBitwise) {
  const config::DlrmConfig config = ParseConfigText(ConfigText(GetParam()));
  const PooledLayout layout(config, Plan(config), kWorld);
  const std::unique_ptr<Pooler> whole_owned = WholeModel(config);
  Pooler& whole = *whole_owned;
  ASSERT_EQ(layout.pooled_width(), whole.width);
  std::vector<std::unique_ptr<Pooler>> owners;
  for (int32_t r = 0; r < kWorld; ++r)
    owners.push_back(
        Shards(config, layout.owned_shards(r), layout.owned_slices(r), layout.owned_width(r)));
  const std::unique_ptr<Pooler> replica =
      Shards(config, layout.local_shards(), layout.local_slices(), layout.local_width());
  for (int64_t step = 1; step <= 2; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    const OwnedBatch global = GlobalBatch(config, 10 + step);
    const ValidatedBatch vb = whole.Validate(global);
    const std::vector<float> pooled = whole.Forward(vb);
    const std::vector<float> d_pooled = Gradient(pooled.size(), 20 + step);
    DistributedStep(layout, global, pooled, d_pooled, owners, *replica, step);
    whole.bags->BackwardAndUpdate(vb, d_pooled.data(), *whole.optimizer, 0.1f, step, nullptr);
  }
  for (int32_t r = 0; r < kWorld; ++r)
    ExpectShardsEqualTables(whole, *owners[r], layout.owned_shards(r), "rank " + std::to_string(r));
  ExpectShardsEqualTables(whole, *replica, layout.local_shards(), "replica");
}

INSTANTIATE_TEST_SUITE_P(Optimizers, PooledLayoutStepTest,
                         ::testing::Values("sgd {}", "adagrad {}",
                                           "adam { beta1: 0.9 beta2: 0.999 }"));

TEST(PooledLayoutTest, PlacesSlicesInFeatureOrder) {
  const config::DlrmConfig config = ParseConfigText(ConfigText("sgd {}"));
  const PooledLayout layout(config, Plan(config), kWorld);
  // Pooled row: f0 [0, 8), f1 [8, 14), f2 [14, 22), f3 [22, 26), f4 [26, 31).
  EXPECT_EQ(layout.pooled_width(), 31);
  // Rank 0: t0 columns [3, 8) (f0, f2) and t3 (f4); rank 1: t1 (f1); rank 2: t0 [0, 3).
  EXPECT_EQ(layout.input_features(0), (std::vector<int32_t>{0, 2, 4}));
  EXPECT_EQ(layout.input_features(1), (std::vector<int32_t>{1}));
  EXPECT_EQ(layout.input_features(2), (std::vector<int32_t>{0, 2}));
  EXPECT_EQ(layout.owned_width(0), 5 + 5 + 5);
  EXPECT_EQ(layout.owned_width(1), 6);
  EXPECT_EQ(layout.owned_width(2), 3 + 3);
  const std::vector<PooledSlice>& r0 = layout.owned_slices(0);
  ASSERT_EQ(r0.size(), 3u);
  EXPECT_EQ(r0[1].feature, 2);
  EXPECT_EQ(r0[1].pooled_column, 14 + 3);
  EXPECT_EQ(r0[1].owned_column, 5);
  EXPECT_TRUE(layout.owned_slices(1)[0].mean);
  EXPECT_EQ(layout.local_width(), 4);
  EXPECT_EQ(layout.local_slices()[0].pooled_column, 22);
  EXPECT_EQ(layout.SamplesPerRank(kGlobal), kPerRank);
}

// Plan(config) with t1 (30 rows) cut into row-wise pieces [0, 10) on rank 2, [10, 20) on
// rank 0 and [20, 30) on rank 1 (listed out of row order).
ShardingPlan RowWisePlan(const config::DlrmConfig& config) {
  ShardingPlan plan = Plan(config);
  plan.mutable_shards()->DeleteSubrange(2, 1);
  for (const auto& [rank, begin] : {std::pair{0, 10}, std::pair{2, 0}, std::pair{1, 20}}) {
    TableShard s = Shard(config, 1, config::ShardingConfig::ROW_WISE, rank, 0, 6);
    s.set_row_begin(begin);
    s.set_row_end(begin + 10);
    *plan.add_shards() = s;
  }
  return plan;
}

TEST(PooledLayoutTest, PlacesRowWisePiecesAsTablesEveryRankFetches) {
  const config::DlrmConfig config = ParseConfigText(ConfigText("sgd {}"));
  const PooledLayout layout(config, RowWisePlan(config), kWorld);
  ASSERT_EQ(layout.fetched_tables().size(), 1u);
  const FetchedTable& t1 = layout.fetched_tables()[0];
  EXPECT_EQ(t1.table, 1);
  ASSERT_EQ(t1.pieces.size(), 3u);
  for (int32_t p = 0; p < 3; ++p) {
    EXPECT_EQ(t1.pieces[p].rank, (std::vector<int32_t>{2, 0, 1})[p]);
    EXPECT_EQ(t1.pieces[p].row_begin, 10 * p);
    EXPECT_EQ(t1.pieces[p].row_end, 10 * p + 10);
  }
  ASSERT_EQ(layout.fetched_slices().size(), 1u);
  const PooledSlice& f1 = layout.fetched_slices()[0];
  EXPECT_EQ(f1.feature, 1);
  EXPECT_EQ(f1.pooled_column, 8);
  EXPECT_EQ(f1.owned_column, 0);
  EXPECT_EQ(f1.width, 6);
  EXPECT_TRUE(f1.mean);
  EXPECT_EQ(layout.fetched_width(), 6);
  for (int32_t r = 0; r < kWorld; ++r)
    EXPECT_EQ(layout.range_features(r), (std::vector<int32_t>{1})) << "rank " << r;
  EXPECT_TRUE(layout.input_features(1).empty());  // t1 was rank 1's only pooled table
  EXPECT_EQ(layout.owned_width(1), 0);
  // The fetched block lands in f1's columns; the owned and replicated ones where they were.
  const OwnedBatch local = SliceBatch(GlobalBatch(config, 1).view(), 0, 2);
  EXPECT_EQ(layout.FetchedInput(local.view()).num_sparse, 1);
  std::vector<std::vector<float>> blocks;
  for (int32_t r = 0; r < kWorld; ++r) blocks.emplace_back(2 * layout.owned_width(r), 1.0f);
  const std::vector<float> replicated(2 * layout.local_width(), 2.0f), fetched(2 * 6, 3.0f);
  std::vector<float> pooled(2 * layout.pooled_width(), -1.0f);
  layout.Assemble(blocks, replicated, fetched, 2, pooled.data());
  for (int64_t i = 0; i < 2; ++i)
    for (int32_t c = 0; c < layout.pooled_width(); ++c)
      EXPECT_EQ(pooled[i * layout.pooled_width() + c], c >= 8 && c < 14    ? 3.0f
                                                       : c >= 22 && c < 26 ? 2.0f
                                                                           : 1.0f)
          << "sample " << i << " column " << c;
}

// A ROW_WISE shard of all rows (the planner's one piece) is a whole table its holder pools.
TEST(PooledLayoutTest, ARowWiseShardOfAllRowsIsPooledByItsHolder) {
  const config::DlrmConfig config = ParseConfigText(ConfigText("sgd {}"));
  ShardingPlan plan = Plan(config);
  plan.mutable_shards(2)->set_type(config::ShardingConfig::ROW_WISE);  // t1, rows [0, 30)
  const PooledLayout layout(config, plan, kWorld);
  EXPECT_TRUE(layout.fetched_tables().empty());
  EXPECT_EQ(layout.input_features(1), (std::vector<int32_t>{1}));
  EXPECT_EQ(layout.owned_width(1), 6);
}

void ExpectRefused(const config::DlrmConfig& config, const ShardingPlan& plan, int32_t world,
                   const std::string& expected) {
  try {
    const PooledLayout layout(config, plan, world);
    ADD_FAILURE() << "accepted; expected: " << expected;
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(e.what(), HasSubstr(expected));
  }
}

TEST(PooledLayoutTest, RefusesPlansItCannotExchangeNamingTheTable) {
  const config::DlrmConfig config = ParseConfigText(ConfigText("sgd {}"));
  ExpectRefused(config, Plan(config), 2, "places shards on 3 servers but world_size is 2");
  ShardingPlan plan = Plan(config);
  plan.mutable_shards(2)->set_type(config::ShardingConfig::TABLE_ROW_WISE);
  ExpectRefused(config, plan, kWorld, "table \"t1\" is sharded TABLE_ROW_WISE");
  // Row-wise pieces: with another type, two on a rank, not tiling the rows, not whole rows.
  plan = RowWisePlan(config);
  plan.mutable_shards(4)->set_type(config::ShardingConfig::COLUMN_WISE);
  ExpectRefused(config, plan, kWorld, "table \"t1\" mixes ROW_WISE pieces with a COLUMN_WISE");
  plan = RowWisePlan(config);
  plan.mutable_shards(5)->set_server(0);
  ExpectRefused(config, plan, kWorld, "rank 0 holds two row-wise pieces of table \"t1\"");
  plan = RowWisePlan(config);
  plan.mutable_shards(5)->set_row_end(9);  // rows [0, 9), then [10, 20)
  ExpectRefused(config, plan, kWorld,
                "table \"t1\": shard rows [10, 20) x columns [0, 6) does not continue a tiling");
  plan = RowWisePlan(config);
  plan.mutable_shards(6)->set_col_end(5);
  ExpectRefused(config, plan, kWorld, "shard rows [20, 30) x columns [0, 5) does not continue");
  plan = RowWisePlan(config);
  plan.mutable_shards()->DeleteSubrange(6, 1);
  ExpectRefused(config, plan, kWorld, "table \"t1\": its row-wise pieces cover rows [0, 20) of 30");
  plan = RowWisePlan(config);
  plan.mutable_shards(6)->set_server(3);
  ExpectRefused(config, plan, kWorld, "table \"t1\": shard on server 3, outside [0, 3)");
  plan = Plan(config);
  plan.mutable_shards(4)->set_row_end(39);
  ExpectRefused(config, plan, kWorld, "table \"t3\": shard rows [0, 39)");
  plan = Plan(config);
  plan.mutable_shards(1)->set_col_end(7);
  ExpectRefused(config, plan, kWorld, "table \"t0\": its shards cover columns [0, 7) of 8");
  plan = Plan(config);
  plan.mutable_shards(2)->set_server(3);
  ExpectRefused(config, plan, kWorld, "table \"t1\": shard on server 3, outside [0, 3)");
  plan = Plan(config);
  plan.mutable_shards(0)->set_server(0);  // both of t0's blocks on rank 0
  ExpectRefused(config, plan, kWorld, "rank 0 holds two pieces of table \"t0\" (feature");
  plan = Plan(config);
  plan.mutable_shards()->DeleteSubrange(2, 1);
  ExpectRefused(config, plan, kWorld, "the plan has no shard of table \"t1\"");
  const config::DlrmConfig rowwise = ParseConfigText(ConfigText("rowwise_adagrad {}"));
  ExpectRefused(rowwise, Plan(rowwise), kWorld, "row-wise Adagrad keeps one statistic");
}

TEST(PooledLayoutTest, RefusesMalformedInputPartsNamingTheRank) {
  const config::DlrmConfig config = ParseConfigText(ConfigText("sgd {}"));
  const PooledLayout layout(config, Plan(config), kWorld);
  const OwnedBatch global = GlobalBatch(config, 1);
  const OwnedBatch local = SliceBatch(global.view(), 0, kPerRank);
  std::vector<OwnedBatch> parts;
  for (int32_t q = 0; q < kWorld; ++q) parts.push_back(layout.SplitInput(local.view())[0]);
  EXPECT_EQ(layout.JoinInput(0, parts).batch_size, kGlobal);
  auto expect_refused = [&](std::vector<OwnedBatch> bad, const std::string& expected) {
    try {
      layout.JoinInput(0, bad);
      ADD_FAILURE() << "accepted; expected: " << expected;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), StatusCode::kInvalidArgument);
      EXPECT_THAT(e.what(), HasSubstr(expected));
    }
  };
  expect_refused({parts[0], parts[1]}, "rank 0 joins 2 input parts; expected one from each of 3");
  std::vector<OwnedBatch> bad = parts;
  bad[1].lengths.pop_back();
  expect_refused(bad, "input part from rank 1 has 3 features x 5 samples (14 lengths)");
  bad = parts;
  bad[2].lengths[0] = -1;
  expect_refused(bad, "input part from rank 2 has a negative length -1");
  bad = parts;
  bad[1].ids.push_back(0);
  expect_refused(bad, "input part from rank 1 has");
  // A forged size past any batch is refused before a size is computed from it
  // (tests/fuzz/fuzz_exchange found 4 features x (2^62 + 4) samples: the lengths' count
  // wrapped to 16, and the joined batch size overflowed).
  bad = parts;
  bad[1].batch_size = (int64_t{1} << 62) + kPerRank;
  expect_refused(bad, "input part from rank 1 has batch_size 4611686018427387909, outside [0, ");
  bad[1].batch_size = -1;
  expect_refused(bad, "input part from rank 1 has batch_size -1");
  EXPECT_THROW(layout.SamplesPerRank(16), Error);
  EXPECT_THROW(layout.owned_width(3), Error);
  OwnedBatch wrong = local;
  wrong.num_sparse = 4;
  EXPECT_THROW(layout.SplitInput(wrong.view()), Error);
}

// The planner's plans for a job of 4 GPUs, with the types the exchange takes: every
// column of every feature is pooled exactly once, by one rank or by all (replicated).
TEST(PooledLayoutTest, ThePlannersPlansCoverEveryPooledColumnOnce) {
  config::DlrmConfig config = ParseConfigText(ConfigText("adagrad {}"));
  for (const char* table : {"t0", "t1", "t2", "t3"}) {
    auto* options = config.mutable_sharding()->add_tables();
    options->set_table(table);
    options->add_allowed_types(config::ShardingConfig::TABLE_WISE);
    options->add_allowed_types(config::ShardingConfig::COLUMN_WISE);
    options->add_allowed_types(config::ShardingConfig::DATA_PARALLEL);
  }
  config.mutable_sharding()->set_data_parallel_max_bytes(700);  // t2 only (320 B + as much state)
  const PooledLayout layout(config, PlanSharding(config, 4), 4);
  std::vector<int> covered(layout.pooled_width(), 0);
  auto mark = [&](const std::vector<PooledSlice>& slices) {
    for (const PooledSlice& s : slices)
      for (int32_t c = 0; c < s.width; ++c) ++covered[s.pooled_column + c];
  };
  for (int32_t r = 0; r < 4; ++r) mark(layout.owned_slices(r));
  mark(layout.local_slices());
  EXPECT_EQ(covered, std::vector<int>(layout.pooled_width(), 1));
  EXPECT_EQ(layout.local_width(), 4);
}

}  // namespace
}  // namespace dlrm::shard

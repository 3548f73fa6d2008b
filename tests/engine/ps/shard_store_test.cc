// Embedding shards reproduce single-process training bitwise: for every sharding type and
// sparse optimizer, rows looked up and updated through the shard stores of two servers
// (and the trainers' replicas) equal the rows of one process's whole tables, when the
// global batch's updates come from two trainers' halves.
#include "engine/ps/shard_store.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "engine/config/config.h"
#include "engine/core/philox.h"
#include "engine/core/status.h"
#include "engine/embedding/embedding_bag.h"
#include "engine/shard/planner.h"
#include "tests/support/dist_config.h"
#include "tests/support/test_support.h"

namespace dlrm {
namespace {

using namespace ::dlrm::testing;  // the suites' shared helpers

using Type = config::ShardingConfig::Type;
constexpr int32_t kServers = 2;

// A step's data for 8 samples: random bags (0-3 ids, weighted), random pooled gradients.
struct Step {
  std::vector<ps::FeatureUpdate> per_feature;  // whole batch
};

Step MakeStep(const config::DlrmConfig& c, int64_t batch, uint64_t salt) {
  Step s;
  const CounterRng rng(77, 5, salt);
  uint64_t k = 0;
  for (int f = 0; f < c.model().sparse_features_size(); ++f) {
    ps::FeatureUpdate u;
    u.feature = f;
    const int t = FindTable(c.model(), c.model().sparse_features(f).table());
    const int64_t rows = c.model().tables(t).num_rows();
    for (int64_t b = 0; b < batch; ++b) {
      const auto len = static_cast<int32_t>(rng.Uniform(k++) * 4);
      u.lengths.push_back(len);
      for (int32_t i = 0; i < len; ++i) {
        // Half the ids among the first 3 rows: repeated ids within and across trainers.
        const double pick = rng.Uniform(k++);
        u.ids.push_back(pick < 0.5 ? static_cast<int64_t>(pick * 6)
                                   : static_cast<int64_t>(rng.Uniform(k++) * rows));
        u.weights.push_back(static_cast<float>(0.5 + rng.Uniform(k++)));
      }
    }
    const int dim = c.model().tables(t).dim();
    for (int64_t i = 0; i < batch * dim; ++i)
      u.d_pooled.push_back(static_cast<float>(rng.Normal(k++)));
    s.per_feature.push_back(std::move(u));
  }
  return s;
}

// Samples [b0, b1) of a whole-batch update: what trainer k sends.
ps::FeatureUpdate Slice(const ps::FeatureUpdate& u, int64_t b0, int64_t b1, int dim) {
  ps::FeatureUpdate out;
  out.feature = u.feature;
  int64_t first = 0;
  for (int64_t b = 0; b < b0; ++b) first += u.lengths[b];
  int64_t count = 0;
  for (int64_t b = b0; b < b1; ++b) {
    out.lengths.push_back(u.lengths[b]);
    count += u.lengths[b];
  }
  out.ids.assign(u.ids.begin() + first, u.ids.begin() + first + count);
  out.weights.assign(u.weights.begin() + first, u.weights.begin() + first + count);
  out.d_pooled.assign(u.d_pooled.begin() + b0 * dim, u.d_pooled.begin() + b1 * dim);
  return out;
}

// The single-process reference: whole tables, one collection, one optimizer.
struct Reference {
  std::vector<EmbeddingTable<float>> tables;
  std::unique_ptr<EmbeddingBagCollection<float>> bags;
  std::unique_ptr<SparseOptimizer<float>> optimizer;
  std::vector<int> feature_offsets;
  int width = 0;

  explicit Reference(const config::DlrmConfig& c) {
    std::vector<TableShape> shapes;
    for (int t = 0; t < c.model().tables_size(); ++t) {
      const auto& tc = c.model().tables(t);
      tables.emplace_back(tc.name(), tc.num_rows(), tc.dim());
      tables.back().Initialize(tc.initializer(), c.seed(), t);
      shapes.push_back({tc.num_rows(), tc.dim()});
    }
    std::vector<FeatureBinding> bindings;
    for (const auto& f : c.model().sparse_features()) {
      FeatureBinding b;
      b.table = FindTable(c.model(), f.table());
      b.offset = width;
      b.mean = f.pooling() == config::SparseFeatureConfig::MEAN;
      bindings.push_back(b);
      feature_offsets.push_back(width);
      width += tables[b.table].dim();
    }
    bags = std::make_unique<EmbeddingBagCollection<float>>(&tables, bindings, width);
    optimizer = MakeSparseOptimizer<float>(c.sparse_optimizer(), shapes);
  }

  void Apply(const Step& s, int64_t batch, float lr, int64_t step) {
    std::vector<int32_t> lengths;
    std::vector<int64_t> ids;
    std::vector<float> weights, d_pooled(static_cast<size_t>(batch) * width);
    for (size_t f = 0; f < s.per_feature.size(); ++f) {
      const ps::FeatureUpdate& u = s.per_feature[f];
      lengths.insert(lengths.end(), u.lengths.begin(), u.lengths.end());
      ids.insert(ids.end(), u.ids.begin(), u.ids.end());
      weights.insert(weights.end(), u.weights.begin(), u.weights.end());
      const int dim = static_cast<int>(u.d_pooled.size() / batch);
      for (int64_t b = 0; b < batch; ++b)
        std::copy(u.d_pooled.begin() + b * dim, u.d_pooled.begin() + (b + 1) * dim,
                  d_pooled.begin() + b * width + feature_offsets[f]);
    }
    ValidatedBatch vb;
    vb.view.batch_size = batch;
    vb.view.num_sparse = static_cast<int32_t>(s.per_feature.size());
    vb.view.lengths = lengths.data();
    vb.view.num_ids = static_cast<int64_t>(ids.size());
    vb.view.ids = ids.data();
    vb.view.weights = weights.data();
    vb.offsets.assign(lengths.size() + 1, 0);
    for (size_t i = 0; i < lengths.size(); ++i) vb.offsets[i + 1] = vb.offsets[i] + lengths[i];
    bags->BackwardAndUpdate(vb, d_pooled.data(), *optimizer, lr, step, nullptr);
  }
};

std::vector<ps::FeatureUpdate> ForOwner(const std::vector<ps::FeatureUpdate>& global,
                                        const ps::EmbeddingShardStore& store) {
  std::vector<ps::FeatureUpdate> out;
  for (int32_t f : store.features()) out.push_back(global[f]);
  return out;
}

// Every row of shard i equals the reference table's block, bitwise; Lookup agrees.
void ExpectShardMatches(const ps::EmbeddingShardStore& store, size_t i, const Reference& ref,
                        const std::string& where) {
  const auto& s = store.shards()[i];
  const EmbeddingTable<float>& whole = ref.tables[s.table];
  const EmbeddingTable<float>& piece = store.shard_table(static_cast<int32_t>(i));
  std::vector<int64_t> ids;
  for (int64_t r = s.row_begin; r < s.row_end; ++r) ids.push_back(r);
  std::vector<float> looked_up(ids.size() * piece.dim());
  store.Lookup(static_cast<int32_t>(i), ids.data(), static_cast<int64_t>(ids.size()),
               looked_up.data());
  for (int64_t r = s.row_begin; r < s.row_end; ++r) {
    const float* want = whole.row(r) + s.col_begin;
    ASSERT_EQ(std::memcmp(piece.row(r - s.row_begin), want, piece.dim() * sizeof(float)), 0)
        << where << ": table " << s.table << " row " << r << " columns [" << s.col_begin << ", "
        << s.col_end << ")";
    ASSERT_EQ(std::memcmp(looked_up.data() + (r - s.row_begin) * piece.dim(), want,
                          piece.dim() * sizeof(float)),
              0)
        << where << ": lookup of row " << r;
  }
}

// Every row of every shard equals the reference table's block, bitwise; Lookup agrees.
void ExpectShardsMatch(const ps::EmbeddingShardStore& store, const Reference& ref,
                       const std::string& where) {
  for (size_t i = 0; i < store.shards().size(); ++i) ExpectShardMatches(store, i, ref, where);
}

struct Case {
  Type type;
  std::string optimizer;
};

class ShardStoreTest : public ::testing::TestWithParam<Case> {};

TEST_P(ShardStoreTest, TwoTrainersTwoServersMatchOneProcessBitwise) {
  const Case& param = GetParam();
  const config::DlrmConfig c = ShardedTestConfig(param.type, "sgd", param.optimizer, kServers);
  const shard::ShardingPlan plan = shard::PlanSharding(c, kServers);
  for (const auto& s : plan.shards()) ASSERT_EQ(s.type(), param.type) << s.DebugString();

  std::vector<std::unique_ptr<ps::EmbeddingShardStore>> owners;
  ThreadPool pool(2);
  for (int32_t owner : {0, 1, ps::kTrainerReplica})
    owners.push_back(std::make_unique<ps::EmbeddingShardStore>(c, plan, owner, &pool));
  // Every row of every table is held exactly once by the servers (or by the replicas).
  int64_t held = 0, total = 0;
  for (const auto& o : owners) {
    for (const auto& s : o->shards()) held += (s.row_end - s.row_begin) * (s.col_end - s.col_begin);
  }
  for (const auto& t : c.model().tables()) total += t.num_rows() * t.dim();
  ASSERT_EQ(held, total);
  // The types that split tables do split these ones (else the test would prove little).
  bool split_rows = false, split_cols = false;
  for (const auto& o : owners) {
    for (const auto& s : o->shards()) {
      split_rows |= s.row_end - s.row_begin < c.model().tables(s.table).num_rows();
      split_cols |= s.col_end - s.col_begin < c.model().tables(s.table).dim();
    }
  }
  const bool by_rows = param.type == config::ShardingConfig::ROW_WISE ||
                       param.type == config::ShardingConfig::TABLE_ROW_WISE;
  EXPECT_EQ(split_rows, by_rows);
  EXPECT_EQ(split_cols, param.type == config::ShardingConfig::COLUMN_WISE);
  if (param.type != config::ShardingConfig::DATA_PARALLEL) {
    EXPECT_FALSE(owners[0]->shards().empty());
    EXPECT_FALSE(owners[1]->shards().empty());
    EXPECT_TRUE(owners[2]->shards().empty());
  }

  Reference ref(c);
  const std::string where =
      std::string(shard::ShardingTypeShortName(param.type)) + "/" + param.optimizer;
  for (const auto& o : owners) ExpectShardsMatch(*o, ref, where + " initial");
  constexpr int64_t kBatch = 8;
  for (int64_t step = 1; step <= 4; ++step) {
    const Step s = MakeStep(c, kBatch, static_cast<uint64_t>(step));
    ref.Apply(s, kBatch, 0.05f, step);
    // Two trainers: samples [0, 3) and [3, 8) (unequal halves are allowed).
    std::vector<std::vector<ps::FeatureUpdate>> ranks(2);
    for (const ps::FeatureUpdate& u : s.per_feature) {
      const int dim = static_cast<int>(u.d_pooled.size() / kBatch);
      ranks[0].push_back(Slice(u, 0, 3, dim));
      ranks[1].push_back(Slice(u, 3, kBatch, dim));
    }
    const std::vector<ps::FeatureUpdate> global = ps::ConcatenateRanks(ranks);
    for (const auto& o : owners) {
      if (o->features().empty()) continue;
      o->ApplyUpdate(ForOwner(global, *o), kBatch, 0.05f, step);
    }
    for (const auto& o : owners)
      ExpectShardsMatch(*o, ref, where + " step " + std::to_string(step));
  }
}

std::vector<Case> AllCases() {
  std::vector<Case> cases;
  for (Type type : {config::ShardingConfig::TABLE_WISE, config::ShardingConfig::ROW_WISE,
                    config::ShardingConfig::COLUMN_WISE, config::ShardingConfig::TABLE_ROW_WISE,
                    config::ShardingConfig::DATA_PARALLEL}) {
    for (const char* opt : {"sgd", "adagrad", "rowwise_adagrad", "adam"}) {
      if (type == config::ShardingConfig::COLUMN_WISE && std::string(opt) == "rowwise_adagrad")
        continue;  // rejected: see RowwiseAdagradNeedsWholeRows
      cases.push_back({type, opt});
    }
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(AllTypes, ShardStoreTest, ::testing::ValuesIn(AllCases()),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return std::string(shard::ShardingTypeShortName(info.param.type)) + "_" +
                                  info.param.optimizer;
                         });

// Row-wise Adagrad keeps one statistic per whole row: the planner gives it no column
// blocks (refusing a table allowed nothing else, naming it), and a store refuses a plan
// made otherwise (for another optimizer).
TEST(ShardStoreErrors, RowwiseAdagradNeedsWholeRows) {
  const config::DlrmConfig c =
      ShardedTestConfig(config::ShardingConfig::COLUMN_WISE, "sgd", "rowwise_adagrad", kServers);
  try {
    shard::PlanSharding(c, kServers);
    FAIL() << "the planner cut column blocks for row-wise Adagrad";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("sharding.tables for \"t0\" allows only "
                                               "COLUMN_WISE, which embedding servers cannot hold"));
  }
  const shard::ShardingPlan plan = shard::PlanSharding(
      ShardedTestConfig(config::ShardingConfig::COLUMN_WISE, "sgd", "sgd", kServers), kServers);
  try {
    ps::EmbeddingShardStore store(c, plan, 0);
    FAIL() << "row-wise Adagrad on column shards must be rejected";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("COLUMN_WISE"), std::string::npos) << e.what();
  }
}

// Embedding servers do not take DYNAMIC tables yet: refused naming the table, before any
// shard is allocated (a trainer's replica store is made the same way).
TEST(ShardStoreErrors, DynamicTablesAreRefusedNamingThem) {
  config::DlrmConfig c =
      ShardedTestConfig(config::ShardingConfig::ROW_WISE, "sgd", "sgd", kServers);
  c.mutable_model()->mutable_tables(1)->set_kind(config::TableConfig::DYNAMIC);
  const shard::ShardingPlan plan = shard::PlanSharding(c, kServers);
  for (const int32_t owner : {0, ps::kTrainerReplica}) {
    try {
      ps::EmbeddingShardStore store(c, plan, owner);
      FAIL() << "a DYNAMIC table was sharded";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), StatusCode::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find("model.tables[1] (\"t1\") is DYNAMIC"),
                std::string::npos)
          << e.what();
    }
  }
}

// A review's finding (2026-11-28): a restore checked a shard's coverage by summing the
// saved pieces' overlap areas, so two overlapping pieces beside a gap of the same size
// passed (a forged MANIFEST's plan) and the gap loaded as zeros. Plans are now checked to
// tile every table.
TEST(ShardStoreErrors, PiecesThatOverlapOrLeaveAGapAreRefused) {
  const config::DlrmConfig c =
      ShardedTestConfig(config::ShardingConfig::ROW_WISE, "sgd", "sgd", kServers);
  const shard::ShardingPlan plan = shard::PlanSharding(c, kServers);
  int first = -1, second = -1;  // two row-wise pieces of one table
  for (int i = 0; i < plan.shards_size() && second < 0; ++i) {
    if (plan.shards(i).type() != config::ShardingConfig::ROW_WISE) continue;
    if (first < 0) {
      first = i;
    } else if (plan.shards(i).table() == plan.shards(first).table()) {
      second = i;
    }
  }
  ASSERT_GE(second, 0);
  const std::string table = plan.shards(first).table();
  shard::ShardingPlan overlap = plan;  // the second piece starts one row early: an overlap
  overlap.mutable_shards(second)->set_row_begin(plan.shards(second).row_begin() - 1);
  testing::ExpectError([&] { ps::LocateShards(c.model(), overlap); }, StatusCode::kInvalidArgument,
                       "sharding plan: shards of table '" + table + "' overlap");
  shard::ShardingPlan gap = plan;  // the first piece ends one row early: a row of no piece
  gap.mutable_shards(first)->set_row_end(plan.shards(first).row_end() - 1);
  testing::ExpectError([&] { ps::EmbeddingShardStore store(c, gap, 0); },
                       StatusCode::kInvalidArgument,
                       "sharding plan: the shards of table '" + table + "' cover ");
  EXPECT_EQ(ps::LocateShards(c.model(), plan).size(), static_cast<size_t>(c.model().tables_size()));
}

// Bad requests change nothing and name what was wrong.
TEST(ShardStoreErrors, BadLookupsAndUpdatesLeaveRowsUnchanged) {
  const config::DlrmConfig c =
      ShardedTestConfig(config::ShardingConfig::ROW_WISE, "sgd", "adagrad", kServers);
  const shard::ShardingPlan plan = shard::PlanSharding(c, kServers);
  ps::EmbeddingShardStore store(c, plan, 0);
  ASSERT_FALSE(store.shards().empty());
  Reference ref(c);  // untouched: the initial values
  const auto& s = store.shards()[0];

  std::vector<float> out(8, -1.0f);
  const int64_t outside = s.row_end;  // the first row this server does not hold
  try {
    store.Lookup(0, &outside, 1, out.data());
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), StatusCode::kOutOfRange);
    EXPECT_NE(std::string(e.what()).find("ids[0]"), std::string::npos) << e.what();
  }
  EXPECT_EQ(out, std::vector<float>(8, -1.0f)) << "a failed lookup wrote";
  EXPECT_THROW(store.Lookup(99, &outside, 1, out.data()), Error);

  const Step good = MakeStep(c, 8, 1);
  auto expect_rejected = [&](std::vector<ps::FeatureUpdate> updates, int64_t batch,
                             const std::string& needle) {
    try {
      store.ApplyUpdate(updates, batch, 0.05f, 1);
      ADD_FAILURE() << "accepted; expected an error naming '" << needle << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
    ExpectShardsMatch(store, ref, "after rejecting " + needle);
  };
  const std::vector<ps::FeatureUpdate> base = ForOwner(good.per_feature, store);
  auto bad = base;
  bad[0].lengths.pop_back();
  expect_rejected(bad, 8, "lengths for 8 samples");
  bad = base;
  bad.back().d_pooled[3] = std::nanf("");
  expect_rejected(bad, 8, "d_pooled[3] is not finite");
  bad = base;
  if (!bad[0].ids.empty()) {
    bad[0].ids[0] = 1000;
    expect_rejected(bad, 8, "ids[0] = 1000");
  }
  bad = base;
  bad[0].lengths[0] += 1;
  expect_rejected(bad, 8, "lengths sum to");
  bad = base;
  bad.pop_back();
  expect_rejected(bad, 8, "feature updates");
  bad = base;
  if (!bad[0].ids.empty()) {
    bad[0].weights.pop_back();
    expect_rejected(bad, 8, "weights for");
  }
  expect_rejected(base, 0, "batch_size");
}

// A trainer's own store (ShardRoles::kPoolWholeRows) pools its whole-row shards and serves
// its row-wise pieces; an update's check writes nothing and its apply updates the pieces
// as a server's ApplyUpdate does. kAll (servers, replicas) serves and pools every shard.
TEST(ShardStoreUpdates, ATrainersStorePoolsWholeRowsAndServesItsPieces) {
  config::DlrmConfig c =
      ShardedTestConfig(config::ShardingConfig::ROW_WISE, "sgd", "adagrad", kServers);
  c.mutable_sharding()->mutable_tables()->Mutable(1)->set_allowed_types(
      0, config::ShardingConfig::TABLE_WISE);
  ValidateConfig(c);
  const shard::ShardingPlan plan = shard::PlanSharding(c, kServers, shard::ShardOwners::kTrainers);
  constexpr int64_t kBatch = 8;
  const Step step = MakeStep(c, kBatch, 5);
  Reference initial(c), stepped(c);
  stepped.Apply(step, kBatch, 0.05f, 1);
  bool pooled_any = false;
  for (int32_t owner = 0; owner < kServers; ++owner) {
    const std::string where = "owner " + std::to_string(owner);
    ps::EmbeddingShardStore server(c, plan, owner);
    ps::EmbeddingShardStore trainer(c, plan, owner, nullptr, ps::ShardRoles::kPoolWholeRows);
    EXPECT_EQ(server.pooled_features(), server.features()) << where;
    std::vector<int32_t> both = trainer.pooled_features();
    both.insert(both.end(), trainer.features().begin(), trainer.features().end());
    std::sort(both.begin(), both.end());
    EXPECT_EQ(both, server.features()) << where;  // t1's feature pooled, t0's and t2's served
    pooled_any |= !trainer.pooled_features().empty();
    ASSERT_TRUE(trainer.CheckUpdate(ForOwner(step.per_feature, trainer), kBatch, 0.05f, 1));
    ExpectShardsMatch(trainer, initial, where + " after the check");
    trainer.ApplyCheckedUpdate(0.05f, 1);
    for (size_t i = 0; i < trainer.shards().size(); ++i) {
      const auto& s = trainer.shards()[i];
      const bool piece = s.row_end - s.row_begin < c.model().tables(s.table).num_rows();
      ExpectShardMatches(trainer, i, piece ? stepped : initial, where + " after the apply");
    }
  }
  EXPECT_TRUE(pooled_any) << "no owner holds t1 whole";
}

// A rank's part, or a feature, without per-id weights beside weighted ones means weights of
// 1, as PooledLayout::JoinInput joins bags: the rows are those of explicit ones, bitwise.
TEST(ShardStoreUpdates, MissingWeightsBesideWeightedOnesAreOnes) {
  const config::DlrmConfig c =
      ShardedTestConfig(config::ShardingConfig::ROW_WISE, "sgd", "adagrad", kServers);
  const shard::ShardingPlan plan = shard::PlanSharding(c, kServers);
  constexpr int64_t kBatch = 8;
  const Step step = MakeStep(c, kBatch, 3);
  std::vector<std::vector<ps::FeatureUpdate>> ranks(2), ones(2);
  for (const ps::FeatureUpdate& u : step.per_feature) {
    const int dim = static_cast<int>(u.d_pooled.size() / kBatch);
    ranks[0].push_back(Slice(u, 0, 4, dim));
    ranks[1].push_back(Slice(u, 4, kBatch, dim));
  }
  ones = ranks;
  for (size_t f = 0; f < ranks[1].size(); ++f) {  // rank 1 unweighted
    ranks[1][f].weights.clear();
    std::fill(ones[1][f].weights.begin(), ones[1][f].weights.end(), 1.0f);
  }
  std::vector<ps::FeatureUpdate> joined = ps::ConcatenateRanks(ranks);
  const std::vector<ps::FeatureUpdate> want = ps::ConcatenateRanks(ones);
  for (size_t f = 0; f < joined.size(); ++f) EXPECT_EQ(joined[f].weights, want[f].weights);
  ps::EmbeddingShardStore got_store(c, plan, 0), want_store(c, plan, 0);
  std::vector<ps::FeatureUpdate> mixed = ForOwner(joined, got_store);
  ASSERT_GT(mixed.size(), 1u);
  mixed[1].weights.clear();  // and one feature of the global batch unweighted
  std::vector<ps::FeatureUpdate> explicit_ones = ForOwner(want, want_store);
  std::fill(explicit_ones[1].weights.begin(), explicit_ones[1].weights.end(), 1.0f);
  got_store.ApplyUpdate(mixed, kBatch, 0.05f, 1);
  want_store.ApplyUpdate(explicit_ones, kBatch, 0.05f, 1);
  for (size_t i = 0; i < got_store.shards().size(); ++i) {
    const EmbeddingTable<float>& got = got_store.shard_table(static_cast<int32_t>(i));
    const EmbeddingTable<float>& exp = want_store.shard_table(static_cast<int32_t>(i));
    ASSERT_EQ(got.data().size(), exp.data().size());
    EXPECT_EQ(std::memcmp(got.data().data(), exp.data().data(), got.data().size() * sizeof(float)),
              0)
        << "shard " << i;
  }
}

}  // namespace
}  // namespace dlrm

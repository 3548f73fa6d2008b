// Sync training with 2 trainers and 2 embedding servers (in-process: threads, a local
// communicator and embedding service) reproduces the single-process engine bitwise: the
// losses of every step, every dense parameter and every embedding row, for each sharding
// type and several optimizer sets.
#include "engine/dist/sync_trainer.h"

#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "engine/config/config.h"
#include "engine/core/philox.h"
#include "engine/core/status.h"
#include "engine/engine.h"
#include "engine/shard/planner.h"
#include "tests/dist_test_config.h"

namespace dlrm::dist {
namespace {

using Type = config::ShardingConfig::Type;
constexpr int32_t kServers = 2, kTrainers = 2;
constexpr int64_t kPart = 32, kGlobal = kPart * kTrainers;


OwnedBatch MakeBatch(const config::DlrmConfig& c, int64_t index) {
  const CounterRng rng(3, 9, static_cast<uint64_t>(index));
  uint64_t k = 0;
  OwnedBatch b;
  b.batch_size = kGlobal;
  b.num_dense = c.model().num_dense_features();
  b.num_sparse = c.model().sparse_features_size();
  for (int64_t i = 0; i < kGlobal * b.num_dense; ++i)
    b.dense.push_back(static_cast<float>(rng.Normal(k++)));
  for (int64_t i = 0; i < kGlobal; ++i) b.labels.push_back(rng.Uniform(k++) < 0.3 ? 1.0f : 0.0f);
  for (int f = 0; f < b.num_sparse; ++f) {
    const int t = FindTable(c.model(), c.model().sparse_features(f).table());
    const int64_t rows = c.model().tables(t).num_rows();
    for (int64_t s = 0; s < kGlobal; ++s) {
      const auto len = static_cast<int32_t>(rng.Uniform(k++) * 4);
      b.lengths.push_back(len);
      for (int32_t i = 0; i < len; ++i) {
        const double pick = rng.Uniform(k++);
        b.ids.push_back(pick < 0.5 ? static_cast<int64_t>(pick * 8)
                                   : static_cast<int64_t>(rng.Uniform(k++) * rows));
        b.weights.push_back(static_cast<float>(0.5 + rng.Uniform(k++)));
      }
    }
  }
  return b;
}

// Samples [s0, s1) of a batch.
OwnedBatch Part(const OwnedBatch& g, int64_t s0, int64_t s1) {
  OwnedBatch p;
  p.batch_size = s1 - s0;
  p.num_dense = g.num_dense;
  p.num_sparse = g.num_sparse;
  p.dense.assign(g.dense.begin() + s0 * g.num_dense, g.dense.begin() + s1 * g.num_dense);
  p.labels.assign(g.labels.begin() + s0, g.labels.begin() + s1);
  int64_t pos = 0;
  for (int f = 0; f < g.num_sparse; ++f) {
    for (int64_t s = 0; s < g.batch_size; ++s) {
      const int32_t len = g.lengths[f * g.batch_size + s];
      if (s >= s0 && s < s1) {
        p.lengths.push_back(len);
        p.ids.insert(p.ids.end(), g.ids.begin() + pos, g.ids.begin() + pos + len);
        p.weights.insert(p.weights.end(), g.weights.begin() + pos, g.weights.begin() + pos + len);
      }
      pos += len;
    }
  }
  return p;
}

struct Cluster {
  shard::ShardingPlan plan;
  std::vector<std::unique_ptr<EmbeddingShardStore>> servers;
  std::unique_ptr<LocalEmbeddingService> service;
  LocalCommunicatorHub hub{kTrainers, std::chrono::seconds(20)};
  std::vector<std::unique_ptr<Communicator>> comms;
  std::vector<std::unique_ptr<ThreadPool>> pools;
  std::vector<std::unique_ptr<SyncTrainer>> trainers;

  explicit Cluster(const config::DlrmConfig& c, int64_t staleness = 0)
      : plan(shard::PlanSharding(c, kServers)) {
    std::vector<EmbeddingShardStore*> raw;
    for (int s = 0; s < kServers; ++s) {
      servers.push_back(std::make_unique<EmbeddingShardStore>(c, plan, s));
      raw.push_back(servers.back().get());
    }
    service = std::make_unique<LocalEmbeddingService>(raw, kTrainers, staleness,
                                                      std::chrono::seconds(20));
    for (int r = 0; r < kTrainers; ++r) {
      comms.push_back(hub.Rank(r));
      pools.push_back(std::make_unique<ThreadPool>(r + 1));  // thread counts differ on purpose
      trainers.push_back(std::make_unique<SyncTrainer>(c, plan, comms.back().get(),
                                                       service.get(), pools.back().get()));
    }
  }

  // Every trainer's step on its part, concurrently; the losses by rank, or the errors.
  std::vector<float> Step(const std::vector<OwnedBatch>& parts, std::vector<std::string>* errors,
                          bool wait_applied = true) {
    std::vector<float> losses(kTrainers, 0.0f);
    errors->assign(kTrainers, "");
    std::vector<std::thread> threads;
    for (int r = 0; r < kTrainers; ++r) {
      threads.emplace_back([&, r] {
        try {
          losses[r] = trainers[r]->TrainStep(parts[r].view());
        } catch (const Error& e) {
          (*errors)[r] = e.what();
        }
      });
    }
    for (auto& t : threads) t.join();
    // Updates are applied in the background; parameters are compared once they landed.
    if (wait_applied) service->WaitUntilApplied(trainers[0]->step());
    return losses;
  }
};

// Every dense parameter and embedding row of the cluster equals the engine's, bitwise.
void ExpectSameParameters(const Engine& engine, const Cluster& cluster,
                          const config::DlrmConfig& c, const std::string& where) {
  for (const auto& trainer : cluster.trainers) {
    for (const DenseParamInfo& p : trainer->model().dense_param_infos()) {
      std::vector<float> want(p.size);
      engine.ReadParameter(p.name, want.data(), static_cast<int64_t>(want.size()));
      ASSERT_EQ(std::memcmp(want.data(), trainer->model().dense_params().data() + p.offset,
                            p.size * sizeof(float)),
                0)
          << where << ": " << p.name;
    }
  }
  std::vector<const EmbeddingShardStore*> owners;
  for (const auto& s : cluster.servers) owners.push_back(s.get());
  for (const auto& t : cluster.trainers) owners.push_back(&t->replicas());
  for (int t = 0; t < c.model().tables_size(); ++t) {
    const auto& tc = c.model().tables(t);
    std::vector<float> want(tc.num_rows() * tc.dim());
    engine.ReadParameter("embedding." + tc.name() + ".weight", want.data(),
                         static_cast<int64_t>(want.size()));
    int64_t covered = 0;
    for (const EmbeddingShardStore* o : owners) {
      for (size_t i = 0; i < o->shards().size(); ++i) {
        const auto& s = o->shards()[i];
        if (s.table != t) continue;
        const EmbeddingTable<float>& piece = o->shard_table(static_cast<int32_t>(i));
        for (int64_t r = s.row_begin; r < s.row_end; ++r) {
          const float* expected = want.data() + r * tc.dim() + s.col_begin;
          ASSERT_EQ(std::memcmp(piece.row(r - s.row_begin), expected, piece.dim() * sizeof(float)),
                    0)
              << where << ": table " << tc.name() << " row " << r;
          covered += piece.dim();
        }
      }
    }
    EXPECT_GE(covered, tc.num_rows() * tc.dim()) << where << ": table " << tc.name();
  }
}

struct Case {
  Type type;
  std::string dense, sparse;
};

class SyncTrainerTest : public ::testing::TestWithParam<Case> {};

TEST_P(SyncTrainerTest, TwoTrainersTwoServersEqualOneProcessBitwise) {
  const Case& param = GetParam();
  const config::DlrmConfig c =
      ShardedTestConfig(param.type, param.dense, param.sparse, kServers);
  Engine engine(c);
  Cluster cluster(c);
  const std::string name = std::string(shard::ShardingTypeShortName(param.type)) + "/" +
                           param.dense + "+" + param.sparse;
  for (int64_t step = 0; step < 5; ++step) {
    const OwnedBatch global = MakeBatch(c, step);
    const float want = engine.TrainStep(global.view());
    std::vector<std::string> errors;
    const std::vector<float> losses =
        cluster.Step({Part(global, 0, kPart), Part(global, kPart, kGlobal)}, &errors);
    for (int r = 0; r < kTrainers; ++r) {
      ASSERT_EQ(errors[r], "") << name << " rank " << r;
      ASSERT_EQ(std::memcmp(&losses[r], &want, sizeof(float)), 0)
          << name << " step " << step << " rank " << r << ": " << losses[r] << " vs " << want;
    }
    ExpectSameParameters(engine, cluster, c, name + " step " + std::to_string(step));
  }
}

std::vector<Case> AllCases() {
  std::vector<Case> cases;
  for (Type type : {config::ShardingConfig::TABLE_WISE, config::ShardingConfig::ROW_WISE,
                    config::ShardingConfig::COLUMN_WISE, config::ShardingConfig::TABLE_ROW_WISE,
                    config::ShardingConfig::DATA_PARALLEL}) {
    cases.push_back({type, "sgd", "sgd"});
    cases.push_back({type, "adagrad", "adagrad"});
    cases.push_back({type, "adam",
                     type == config::ShardingConfig::COLUMN_WISE ? "adam" : "rowwise_adagrad"});
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(AllTypes, SyncTrainerTest, ::testing::ValuesIn(AllCases()),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return std::string(shard::ShardingTypeShortName(info.param.type)) +
                                  "_" + info.param.dense + "_" + info.param.sparse;
                         });

// A bad part on one trainer fails the step on both with the same message, and nothing
// changes anywhere: the next good step still matches the engine.
TEST(SyncTrainerErrors, BadPartFailsEveryRankAndChangesNothing) {
  const config::DlrmConfig c =
      ShardedTestConfig(config::ShardingConfig::ROW_WISE, "sgd", "adagrad", kServers);
  Engine engine(c);
  Cluster cluster(c);
  const OwnedBatch global = MakeBatch(c, 0);
  OwnedBatch bad = Part(global, kPart, kGlobal);
  bad.ids[0] = 10'000;  // outside every table
  std::vector<std::string> errors;
  cluster.Step({Part(global, 0, kPart), bad}, &errors);
  for (int r = 0; r < kTrainers; ++r) {
    EXPECT_NE(errors[r].find("trainer 1's batch part"), std::string::npos) << errors[r];
    EXPECT_NE(errors[r].find("ids"), std::string::npos) << errors[r];
  }
  // Unequal parts are refused the same way.
  cluster.Step({Part(global, 0, 16), Part(global, 16, kGlobal)}, &errors);
  for (int r = 0; r < kTrainers; ++r) EXPECT_NE(errors[r], "") << "rank " << r;
  ExpectSameParameters(engine, cluster, c, "after the rejected steps");
  EXPECT_EQ(cluster.trainers[0]->step(), 0);

  const float want = engine.TrainStep(global.view());
  const auto losses = cluster.Step({Part(global, 0, kPart), Part(global, kPart, kGlobal)}, &errors);
  EXPECT_EQ(errors[0], "");
  EXPECT_EQ(losses[0], want);
  ExpectSameParameters(engine, cluster, c, "after a good step");
}

// Hybrid mode: with a slow server, trainers run ahead of the embedding updates, but never
// by more than the bound; with bound 0 the same slow server gives the sync result.
TEST(HybridTest, NeverExceedsTheStalenessBound) {
  const config::DlrmConfig c =
      ShardedTestConfig(config::ShardingConfig::TABLE_WISE, "sgd", "sgd", kServers);
  for (const int64_t bound : {0, 1, 3}) {
    Cluster cluster(c, bound);
    cluster.service->set_apply_delay(std::chrono::milliseconds(20));
    Engine engine(c);
    bool all_equal = true;
    for (int64_t step = 0; step < 8; ++step) {
      const OwnedBatch global = MakeBatch(c, step);
      const float want = engine.TrainStep(global.view());
      std::vector<std::string> errors;
      const auto losses = cluster.Step({Part(global, 0, kPart), Part(global, kPart, kGlobal)},
                                       &errors, /*wait_applied=*/false);
      ASSERT_EQ(errors[0], "") << "bound " << bound;
      ASSERT_EQ(errors[1], "") << "bound " << bound;
      ASSERT_TRUE(std::isfinite(losses[0]));
      EXPECT_EQ(losses[0], losses[1]) << "the dense part stays synchronous";
      all_equal &= losses[0] == want;
    }
    const int64_t seen = cluster.service->max_staleness_served();
    EXPECT_LE(seen, bound);
    if (bound == 0) {
      EXPECT_TRUE(all_equal) << "bound 0 is sync: the one-process losses";
    } else {
      // A 20 ms apply against a sub-millisecond dense step: the trainers do run ahead.
      EXPECT_EQ(seen, bound) << "hybrid never used its slack";
    }
  }
}

}  // namespace
}  // namespace dlrm::dist

// The Neo layout's trainers (train/model_parallel_trainer.h), each owning table shards and
// exchanging pooled embeddings by all-to-all, as threads of one process on a local
// communicator (rank r with r + 1 threads, so a result that depended on the thread count
// would show): against the single-process Engine, bitwise, for 1, 2 and 3 ranks, every
// sharding type the exchange takes, several optimizer sets and 16-bit tables; predictions
// and evaluation; a bad part or an overflowing update failing the step on every rank with
// the state unchanged; a 16-bit wire repeating bitwise with half the bytes.
#include "engine/train/model_parallel_trainer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "engine/config/config.h"
#include "engine/core/byte_codec.h"
#include "engine/core/status.h"
#include "engine/engine.h"
#include "engine/shard/planner.h"
#include "tests/support/copying_backend.h"
#include "tests/support/dist_checks.h"
#include "tests/support/dist_config.h"
#include "tests/support/dist_data.h"
#include "tests/support/forging_communicator.h"
#include "tests/support/test_support.h"

namespace dlrm {
namespace {

using namespace ::dlrm::testing;  // the suites' shared helpers

using ::testing::HasSubstr;
using Type = config::ShardingConfig::Type;
constexpr int64_t kPart = 32;  // two reduction chunks of 16

// `world` trainers on one hub, stepped on threads of their own.
struct NeoCluster {
  const int32_t world;
  shard::ShardingPlan plan;
  collective::LocalCommunicatorHub hub;
  std::vector<std::unique_ptr<collective::Communicator>> comms;
  std::vector<std::unique_ptr<ThreadPool>> pools;
  std::vector<std::unique_ptr<train::ModelParallelTrainer>> trainers;

  // devices: the ranks' device side (none: the CPU).
  NeoCluster(const config::DlrmConfig& c, int32_t ranks, const train::TrainerDevices& devices = {})
      : world(ranks),
        plan(shard::PlanSharding(c, ranks, shard::ShardOwners::kTrainers)),
        hub(ranks, std::chrono::seconds(20)) {
    for (int32_t r = 0; r < ranks; ++r) {
      comms.push_back(std::make_unique<ForgingCommunicator>(hub.Rank(r)));
      pools.push_back(std::make_unique<ThreadPool>(r + 1));
      trainers.push_back(std::make_unique<train::ModelParallelTrainer>(
          c, plan, comms.back().get(), pools.back().get(), devices));
    }
  }

  // body(r, trainer) on every rank at once; the errors by rank ("" where none).
  std::vector<std::string> Run(
      const std::function<void(int32_t, train::ModelParallelTrainer&)>& body) {
    std::vector<std::string> errors(world);
    std::vector<std::thread> threads;
    for (int32_t r = 0; r < world; ++r) {
      threads.emplace_back([&, r] {
        try {
          body(r, *trainers[r]);
        } catch (const Error& e) {
          errors[r] = e.what();
        }
      });
    }
    for (std::thread& t : threads) t.join();
    return errors;
  }

  // Each rank's step on its part of `global`; the losses by rank.
  std::vector<float> Step(const OwnedBatch& global, std::vector<std::string>* errors) {
    std::vector<float> losses(world, 0.0f);
    const int64_t part = global.batch_size / world;
    *errors = Run([&](int32_t r, train::ModelParallelTrainer& t) {
      losses[r] = t.TrainStep(Part(global, r * part, (r + 1) * part).view());
    });
    return losses;
  }
};

// Every dense parameter and embedding row of every rank equals the engine's, bitwise.
void ExpectSameParameters(const Engine& engine, const NeoCluster& cluster,
                          const config::DlrmConfig& c, const std::string& where) {
  std::vector<const ps::EmbeddingShardStore*> owners;
  for (const auto& t : cluster.trainers) {
    ExpectDenseMatchesEngine(engine, t->model(), where);
    owners.push_back(&t->owned());
    owners.push_back(&t->replicas());
  }
  ExpectStoresMatchEngine(engine, c, owners, where);
}

void ExpectStepEqualsEngine(Engine& engine, NeoCluster& cluster, const OwnedBatch& global,
                            const std::string& where) {
  const float want = engine.TrainStep(global.view());
  std::vector<std::string> errors;
  const std::vector<float> losses = cluster.Step(global, &errors);
  for (int32_t r = 0; r < cluster.world; ++r) {
    ASSERT_EQ(errors[r], "") << where << " rank " << r;
    ASSERT_EQ(std::memcmp(&losses[r], &want, sizeof(float)), 0)
        << where << " rank " << r << ": " << losses[r] << " vs " << want;
  }
}

struct Case {
  Type type;
  std::string dense, sparse;
  int32_t world;
  config::TableConfig::Precision precision = config::TableConfig::FP32;
};

std::string CaseName(const Case& c) {
  std::string name = std::string(shard::ShardingTypeShortName(c.type)) + "_" + c.dense + "_" +
                     c.sparse + "_" + std::to_string(c.world) + "ranks";
  if (c.precision != config::TableConfig::FP32)
    name += "_" + config::TableConfig::Precision_Name(c.precision);
  return name;
}

void PrintTo(const Case& c, std::ostream* os) { *os << CaseName(c); }

config::DlrmConfig CaseConfig(const Case& c) {
  return WithTablePrecision(ShardedTestConfig(c.type, c.dense, c.sparse, c.world), c.precision);
}

class ModelParallelTrainerTest : public ::testing::TestWithParam<Case> {};

TEST_P(ModelParallelTrainerTest, RanksOwningShardsEqualOneProcessBitwise) {
  const Case& param = GetParam();
  const config::DlrmConfig c = CaseConfig(param);
  Engine engine(c);
  NeoCluster cluster(c, param.world);
  const std::string name = CaseName(param);
  for (int64_t step = 0; step < 4; ++step) {
    const std::string where = name + " step " + std::to_string(step);
    ASSERT_NO_FATAL_FAILURE(ExpectStepEqualsEngine(
        engine, cluster, MakeTestBatch(c, step, kPart * param.world), where));
    ExpectSameParameters(engine, cluster, c, where);
  }
  for (const auto& t : cluster.trainers) EXPECT_EQ(t->step(), 4);
}

std::vector<Case> AllCases() {
  std::vector<Case> cases;
  for (Type type : {config::ShardingConfig::TABLE_WISE, config::ShardingConfig::COLUMN_WISE,
                    config::ShardingConfig::ROW_WISE, config::ShardingConfig::DATA_PARALLEL}) {
    for (int32_t world : {2, 3}) {
      cases.push_back({type, "sgd", "sgd", world});
      cases.push_back({type, "adagrad", "adagrad", world});
    }
    const std::string last =
        type == config::ShardingConfig::COLUMN_WISE ? "adam" : "rowwise_adagrad";
    cases.push_back({type, "adam", last, 2});
    cases.push_back({type, "adam", last, 2, config::TableConfig::BF16});
  }
  cases.push_back({config::ShardingConfig::TABLE_WISE, "sgd", "adagrad", 1});
  cases.push_back({config::ShardingConfig::ROW_WISE, "sgd", "adagrad", 1});  // one piece: whole
  cases.push_back(
      {config::ShardingConfig::COLUMN_WISE, "sgd", "adagrad", 3, config::TableConfig::FP16});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(AllTypes, ModelParallelTrainerTest, ::testing::ValuesIn(AllCases()),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return CaseName(info.param);
                         });

config::DlrmConfig TableWise(int32_t world) {
  return ShardedTestConfig(config::ShardingConfig::TABLE_WISE, "adagrad", "adagrad", world);
}

// t0 in row-wise pieces on every rank, t1 in column blocks, t2 replicated: a rank's store
// serves pieces and pools shards at once, and its pooled rows join fetched, owned and
// replicated columns.
config::DlrmConfig Mixed(int32_t world, const std::string& optimizer = "adagrad",
                         config::TableConfig::Precision precision = config::TableConfig::FP32) {
  config::DlrmConfig c =
      ShardedTestConfig(config::ShardingConfig::ROW_WISE, optimizer, optimizer, world);
  auto* tables = c.mutable_sharding()->mutable_tables();
  tables->Mutable(1)->set_allowed_types(0, config::ShardingConfig::COLUMN_WISE);
  tables->Mutable(2)->set_allowed_types(0, config::ShardingConfig::DATA_PARALLEL);
  ValidateConfig(c);
  return WithTablePrecision(c, precision);
}

TEST(ModelParallelTrainerTest, RowWisePiecesBesideColumnBlocksAndReplicasEqualOneProcessBitwise) {
  for (const auto& [world, optimizer, precision] :
       {std::tuple{3, "adagrad", config::TableConfig::FP32},
        std::tuple{2, "adam", config::TableConfig::BF16}}) {
    const config::DlrmConfig c = Mixed(world, optimizer, precision);
    const std::string name = std::to_string(world) + " ranks, " + optimizer;
    Engine engine(c);
    NeoCluster cluster(c, world);
    const shard::PooledLayout& layout = cluster.trainers[0]->layout();
    ASSERT_EQ(layout.fetched_tables().size(), 1u) << name;
    EXPECT_EQ(layout.fetched_tables()[0].pieces.size(), static_cast<size_t>(world)) << name;
    EXPECT_GT(layout.local_width(), 0) << name;
    for (int32_t r = 0; r < world; ++r)
      EXPECT_FALSE(layout.range_features(r).empty()) << name << " rank " << r;
    for (int64_t step = 0; step < 4; ++step) {
      const std::string where = name + " step " + std::to_string(step);
      ASSERT_NO_FATAL_FAILURE(
          ExpectStepEqualsEngine(engine, cluster, MakeTestBatch(c, step, kPart * world), where));
      ExpectSameParameters(engine, cluster, c, where);
    }
  }
}

// Ranks predict batches of their own sizes; evaluation covers every rank's batches.
void ExpectPredictionsAndEvaluationOfTheEngine(const config::DlrmConfig& c) {
  Engine engine(c);
  NeoCluster cluster(c, 3);
  for (int64_t step = 0; step < 2; ++step)
    ASSERT_NO_FATAL_FAILURE(
        ExpectStepEqualsEngine(engine, cluster, MakeTestBatch(c, step, 3 * kPart), "train"));
  // Rank r predicts 5 + 7r samples; rank 2 evaluates two batches, the others one.
  std::vector<OwnedBatch> batches;
  for (int32_t r = 0; r < 3; ++r) batches.push_back(MakeTestBatch(c, 50 + r, 5 + 7 * r));
  const OwnedBatch extra = MakeTestBatch(c, 60, 9);
  std::vector<std::vector<float>> logits(3);
  std::vector<EvalResult> results(3);
  const std::vector<std::string> errors =
      cluster.Run([&](int32_t r, train::ModelParallelTrainer& t) {
        logits[r].resize(batches[r].batch_size);
        t.PredictLogits(batches[r].view(), logits[r].data());
        std::vector<BatchView> mine{batches[r].view()};
        if (r == 2) mine.push_back(extra.view());
        results[r] = t.Evaluate(mine);
      });
  for (int32_t r = 0; r < 3; ++r) {
    ASSERT_EQ(errors[r], "") << "rank " << r;
    std::vector<float> want(batches[r].batch_size);
    engine.Predict(batches[r].view(), want.data(), static_cast<int64_t>(want.size()));
    for (size_t i = 0; i < want.size(); ++i)  // Predict gives probabilities
      EXPECT_NEAR(1.0 / (1.0 + std::exp(-static_cast<double>(logits[r][i]))), want[i], 1e-6)
          << "rank " << r << " sample " << i;
  }
  const EvalResult want =
      engine.Evaluate({batches[0].view(), batches[1].view(), batches[2].view(), extra.view()});
  for (int32_t r = 0; r < 3; ++r) {
    EXPECT_EQ(results[r].num_samples, want.num_samples) << "rank " << r;
    EXPECT_DOUBLE_EQ(results[r].log_loss, want.log_loss) << "rank " << r;
    EXPECT_DOUBLE_EQ(results[r].auc, want.auc) << "rank " << r;
  }
  // One rank's bad batch fails the prediction on every rank, naming that rank.
  OwnedBatch bad = batches[1];
  bad.ids[0] = -1;
  const std::vector<std::string> refused =
      cluster.Run([&](int32_t r, train::ModelParallelTrainer& t) {
        std::vector<float> out(batches[r].batch_size);
        t.PredictLogits(r == 1 ? bad.view() : batches[r].view(), out.data());
      });
  for (int32_t r = 0; r < 3; ++r)
    EXPECT_THAT(refused[r], HasSubstr("trainer 1's batch: batch.ids[0] = -1")) << "rank " << r;
}

TEST(ModelParallelTrainerTest, PredictionsAndEvaluationAreTheEnginesOverEveryRanksBatches) {
  ExpectPredictionsAndEvaluationOfTheEngine(TableWise(3));
}

TEST(ModelParallelTrainerTest, PredictionsAndEvaluationFetchRowWisePiecesAsTrainingDoes) {
  ExpectPredictionsAndEvaluationOfTheEngine(Mixed(3));
}

// A step that one rank cannot take fails on every rank with that rank's error; nothing
// changes, and the next good step still equals the engine's.
TEST(ModelParallelTrainerTest, ABadPartFailsTheStepOnEveryRankWithTheStateUnchanged) {
  const config::DlrmConfig c = TableWise(2);
  Engine engine(c);
  NeoCluster cluster(c, 2);
  ASSERT_NO_FATAL_FAILURE(
      ExpectStepEqualsEngine(engine, cluster, MakeTestBatch(c, 0, 2 * kPart), "first"));
  const OwnedBatch good = MakeTestBatch(c, 1, 2 * kPart);
  auto expect_refused = [&](const std::function<OwnedBatch(int32_t)>& part_of,
                            const std::string& expected) {
    const std::vector<std::string> errors = cluster.Run(
        [&](int32_t r, train::ModelParallelTrainer& t) { t.TrainStep(part_of(r).view()); });
    for (int32_t r = 0; r < 2; ++r) EXPECT_THAT(errors[r], HasSubstr(expected)) << "rank " << r;
    ExpectSameParameters(engine, cluster, c, expected);
    for (const auto& t : cluster.trainers) EXPECT_EQ(t->step(), 1);
  };
  auto part = [&](int32_t r) { return Part(good, r * kPart, (r + 1) * kPart); };
  expect_refused(
      [&](int32_t r) {
        OwnedBatch p = part(r);
        if (r == 1) p.ids[3] = 1000;
        return p;
      },
      "step 2: trainer 1's part: ");
  expect_refused(
      [&](int32_t r) {
        OwnedBatch p = part(r);
        if (r == 0) p.labels.clear();
        return p;
      },
      "step 2: trainer 0's part: ");
  expect_refused([&](int32_t r) { return r == 1 ? Part(good, kPart, kPart + 16) : part(r); },
                 "step 2: trainer 1 has 16 samples, trainer 0 has 32 (parts must be equal)");
  expect_refused([&](int32_t r) { return Part(good, r * 24, (r + 1) * 24); },
                 "power-of-two number of reduction chunks");
  ASSERT_NO_FATAL_FAILURE(ExpectStepEqualsEngine(engine, cluster, good, "after the refusals"));
  ExpectSameParameters(engine, cluster, c, "after the refusals");
}

// Rewrites one rank's input part (phase 1) as sent: its outcome, its bags after `edit`
// (null: as sent), then `rest` in place of the row requests after them (null: as sent).
void RewriteInputPart(std::string* part, const std::function<void(OwnedBatch*)>& edit,
                      const std::optional<std::string>& rest = std::nullopt) {
  ByteReader in(*part, "input part");
  const train::Outcome outcome = train::GetOutcome(&in);
  OwnedBatch bags = train::GetBags(&in);
  if (edit) edit(&bags);
  const std::string requests = part->substr(part->size() - in.remaining());
  ByteWriter out;
  train::PutOutcome(outcome, &out);
  train::PutBags(bags, &out);
  *part = std::move(out).Take() + rest.value_or(requests);
}

// A step in which rank 1 sends `forge`d bytes fails on every rank with `expected`, and
// changes nothing (the step count stays 1).
void ExpectForgedPartRefused(const Engine& engine, NeoCluster& cluster, const config::DlrmConfig& c,
                             const OwnedBatch& global, const ForgingCommunicator::Forge& forge,
                             const std::string& expected) {
  static_cast<ForgingCommunicator&>(*cluster.comms[1]).forge = forge;
  std::vector<std::string> errors;
  cluster.Step(global, &errors);
  for (int32_t r = 0; r < cluster.world; ++r) {
    EXPECT_THAT(errors[r], HasSubstr(expected)) << "rank " << r;
    EXPECT_EQ(cluster.trainers[r]->step(), 1);
  }
  ExpectSameParameters(engine, cluster, c, "after a forged part: " + expected);
}

// A request for rows outside the owner's piece, or not distinct and ascending (what no
// trainer sends), fails the step on every rank naming the asker; nothing changes.
TEST(ModelParallelTrainerTest, AForgedRowRequestFailsTheStepOnEveryRankNamingTheAsker) {
  const config::DlrmConfig c = Mixed(2);
  Engine engine(c);
  NeoCluster cluster(c, 2);
  ASSERT_NO_FATAL_FAILURE(
      ExpectStepEqualsEngine(engine, cluster, MakeTestBatch(c, 0, 2 * kPart), "first"));
  shard::RowPiece piece;  // rank 0's piece of t0
  for (const shard::RowPiece& p : cluster.trainers[0]->layout().fetched_tables()[0].pieces)
    if (p.rank == 0) piece = p;
  const OwnedBatch good = MakeTestBatch(c, 1, 2 * kPart);
  for (const std::vector<int64_t>& forged :
       {std::vector<int64_t>{piece.row_end + 3}, std::vector<int64_t>{piece.row_begin + 1, 0}}) {
    // Rank 1's input part for rank 0: its outcome and bags as sent, then forged ids.
    ExpectForgedPartRefused(
        engine, cluster, c, good,
        [&](std::vector<std::string>* p) {
          ByteWriter ids;
          ids.PutIndices(forged);
          RewriteInputPart(&(*p)[0], nullptr, std::move(ids).Take());
        },
        "trainer 0 failed pooling its shards: trainer 1 asked for row " +
            std::to_string(forged.back()));
  }
  ASSERT_NO_FATAL_FAILURE(ExpectStepEqualsEngine(engine, cluster, good, "after the refusals"));
}

// Bags from a peer that do not fit this owner's shards (ids past a table's rows, bytes
// cut short: what no trainer sends) fail the step on every rank, not only on the owner
// that received them while the others wait; nothing changes.
TEST(ModelParallelTrainerTest, AForgedInputPartFailsTheStepOnEveryRank) {
  const config::DlrmConfig c = TableWise(2);
  Engine engine(c);
  NeoCluster cluster(c, 2);
  ASSERT_NO_FATAL_FAILURE(
      ExpectStepEqualsEngine(engine, cluster, MakeTestBatch(c, 0, 2 * kPart), "first"));
  const OwnedBatch good = MakeTestBatch(c, 1, 2 * kPart);
  ExpectForgedPartRefused(
      engine, cluster, c, good,
      [](std::vector<std::string>* p) {
        RewriteInputPart(&(*p)[0], [](OwnedBatch* bags) { bags->ids.at(0) = int64_t{1} << 40; });
      },
      "trainer 0 failed pooling its shards: batch.ids");
  ExpectForgedPartRefused(
      engine, cluster, c, good,
      [](std::vector<std::string>* p) { (*p)[0].resize((*p)[0].size() - 3); },
      "trainer 0 failed pooling its shards: model-parallel input");
  // A part of another size sent to rank 0 only (the others get rank 1's real one).
  ExpectForgedPartRefused(
      engine, cluster, c, good,
      [](std::vector<std::string>* p) {
        RewriteInputPart(&(*p)[0], [](OwnedBatch* bags) {
          bags->batch_size = kPart / 2;
          bags->lengths.assign(static_cast<size_t>(bags->num_sparse) * kPart / 2, 0);
          bags->ids.clear();
          bags->weights.clear();
        });
      },
      "trainer 0 failed pooling its shards: step 2: trainer 1 has 16 samples, trainer 0 has 32");
  ASSERT_NO_FATAL_FAILURE(ExpectStepEqualsEngine(engine, cluster, good, "after the refusals"));
}

// A job's evaluation (AppendPredictions: every rank given the same batches) with ranks
// given different numbers fails on every rank alike, as does a count no rank could hold
// (a peer's bytes); the ranks stay in step.
TEST(ModelParallelTrainerTest, EvaluationBatchCountsThatDifferFailEveryRankAlike) {
  const config::DlrmConfig c = TableWise(2);
  Engine engine(c);
  NeoCluster cluster(c, 2);
  ASSERT_NO_FATAL_FAILURE(
      ExpectStepEqualsEngine(engine, cluster, MakeTestBatch(c, 0, 2 * kPart), "first"));
  const std::vector<OwnedBatch> batches{MakeTestBatch(c, 50, 8), MakeTestBatch(c, 51, 8),
                                        MakeTestBatch(c, 52, 8)};
  std::vector<std::string> errors = cluster.Run([&](int32_t r, train::ModelParallelTrainer& t) {
    std::vector<BatchView> mine;
    for (int32_t i = 0; i < 2 + r; ++i) mine.push_back(batches[i].view());
    std::vector<double> probabilities;
    std::vector<float> labels;
    t.AppendPredictions(mine, r, 2, &probabilities, &labels);
  });
  for (int32_t r = 0; r < 2; ++r)
    EXPECT_THAT(errors[r], HasSubstr("evaluation needs the same batches on every trainer: "
                                     "trainer 0 has 2, trainer 1 has 3"))
        << "rank " << r;
  static_cast<ForgingCommunicator&>(*cluster.comms[1]).forge_gather = [](const std::string&) {
    ByteWriter out;
    out.Put<int64_t>(std::numeric_limits<int64_t>::max());
    return std::move(out).Take();
  };
  errors = cluster.Run(
      [&](int32_t, train::ModelParallelTrainer& t) { t.Evaluate({batches[0].view()}); });
  for (int32_t r = 0; r < 2; ++r)
    EXPECT_THAT(errors[r], HasSubstr("trainer 1 sent a batch count of 9223372036854775807"))
        << "rank " << r;
  ASSERT_NO_FATAL_FAILURE(
      ExpectStepEqualsEngine(engine, cluster, MakeTestBatch(c, 1, 2 * kPart), "after"));
  ExpectSameParameters(engine, cluster, c, "after the refusals");
}

// Checkpoint restores set the step; parts queued would then train at other steps.
TEST(ModelParallelTrainerTest, SetStepRefusesQueuedPartsAndNegativeSteps) {
  const config::DlrmConfig c = TableWise(1);
  NeoCluster cluster(c, 1);
  train::ModelParallelTrainer& t = *cluster.trainers[0];
  ExpectError([&] { t.set_step(-1); }, StatusCode::kInvalidArgument,
              "model-parallel trainer: step must be >= 0, got -1");
  const OwnedBatch part = MakeTestBatch(c, 0, kPart);
  t.Enqueue(part.view());
  ExpectError([&] { t.set_step(5); }, StatusCode::kFailedPrecondition,
              "model-parallel trainer: set_step with 1 parts queued");
  EXPECT_EQ(t.step(), 0);
  t.TrainStep();
  t.set_step(7);
  EXPECT_EQ(t.step(), 7);
}

// Feature f's bags emptied (its ids and weights removed).
OwnedBatch WithoutFeature(const OwnedBatch& b, int32_t f) {
  OwnedBatch out = b;
  int64_t begin = 0, count = 0;
  for (int64_t i = 0; i < f * b.batch_size; ++i) begin += b.lengths[i];
  for (int64_t s = 0; s < b.batch_size; ++s) {
    count += b.lengths[f * b.batch_size + s];
    out.lengths[f * b.batch_size + s] = 0;
  }
  out.ids.erase(out.ids.begin() + begin, out.ids.begin() + begin + count);
  out.weights.erase(out.weights.begin() + begin, out.weights.begin() + begin + count);
  return out;
}

// An update that would overflow the shards of some ranks but not of another (whose table
// no sample reads) is refused by every rank before any writes: the ranks agree first.
// Per-id weights of 1e10 make the rows' gradients large while the forward, the loss and
// the dense SGD update stay finite; a sparse learning rate of 1e36 then overflows the rows.
TEST(ModelParallelTrainerTest, AnOverflowOnSomeOwnersShardsFailsTheStepOnEveryRank) {
  config::DlrmConfig c = ShardedTestConfig(config::ShardingConfig::TABLE_WISE, "sgd", "sgd", 3);
  c.mutable_sparse_optimizer()->set_learning_rate(1e36f);
  Engine engine(c);
  NeoCluster cluster(c, 3);
  OwnedBatch batch = WithoutFeature(MakeTestBatch(c, 0, 3 * kPart), 1);  // t1 is not read
  for (float& w : batch.weights) w = 1e10f;
  try {
    engine.TrainStep(batch.view());
    ADD_FAILURE() << "the engine took the step";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("would make a parameter or an optimizer state non-finite"));
  }
  std::vector<std::string> errors;
  cluster.Step(batch, &errors);
  for (int32_t r = 0; r < 3; ++r)
    EXPECT_THAT(errors[r], HasSubstr("would make a parameter or an optimizer state non-finite"))
        << "rank " << r;
  ExpectSameParameters(engine, cluster, c, "after the overflow");
  for (const auto& t : cluster.trainers) EXPECT_EQ(t->step(), 0);
}

// A 16-bit wire: pooled rows, their gradients and the dense gradients rounded at the
// source, so the ranks agree bitwise, a second job repeats the first, the losses stay
// near fp32's and the values' bytes are halved.
// fp32 trained with a BF16 wire: repeatable, the same on every rank, close to an FP32 wire,
// with the bytes sent / FP32's in (low, high).
void ExpectBf16WireRepeatsBitwise(const config::DlrmConfig& fp32, double low, double high) {
  config::DlrmConfig bf16 = fp32;
  bf16.mutable_distributed()->set_wire_precision(config::DistributedConfig::BF16);
  ValidateConfig(bf16);
  NeoCluster wide(fp32, 2), narrow(bf16, 2), again(bf16, 2);
  for (int64_t step = 0; step < 5; ++step) {
    const OwnedBatch global = MakeTestBatch(fp32, step, 2 * kPart);
    std::vector<std::string> errors;
    const std::vector<float> want = wide.Step(global, &errors);
    const std::vector<float> got = narrow.Step(global, &errors);
    const std::vector<float> repeat = again.Step(global, &errors);
    for (int32_t r = 0; r < 2; ++r) {
      ASSERT_EQ(errors[r], "");
      EXPECT_EQ(std::memcmp(&got[r], &repeat[r], sizeof(float)), 0) << "step " << step;
      EXPECT_EQ(std::memcmp(&got[r], &got[0], sizeof(float)), 0) << "step " << step;
      EXPECT_NEAR(got[r], want[r], 0.01 * std::abs(want[r])) << "step " << step;
    }
  }
  for (int32_t r = 0; r < 2; ++r) {
    EXPECT_EQ(narrow.trainers[r]->model().dense_params(),
              again.trainers[r]->model().dense_params());
    EXPECT_EQ(narrow.trainers[r]->model().dense_params(),
              narrow.trainers[0]->model().dense_params());
    const auto& w = wide.trainers[r]->wire_bytes();
    const auto& n = narrow.trainers[r]->wire_bytes();
    EXPECT_EQ(w.steps, 5);
    const double ratio = static_cast<double>(n.sent) / static_cast<double>(w.sent);
    EXPECT_GT(ratio, low) << "rank " << r;
    EXPECT_LT(ratio, high) << "rank " << r;
  }
}

TEST(ModelParallelTrainerTest, ABf16WireRepeatsBitwiseWithHalfTheBytes) {
  // The values halve; the input's ids (32-bit words) and lengths do not.
  ExpectBf16WireRepeatsBitwise(
      ShardedTestConfig(config::ShardingConfig::COLUMN_WISE, "adam", "adagrad", 2), 0.5, 0.7);
  // Pieces' rows and their updates' gradients halve too; their ids do not.
  ExpectBf16WireRepeatsBitwise(Mixed(2, "adam"), 0.5, 0.75);
}

// The dense step runs on the trainer's device (trainer_backend.h): a backend with its own
// copy of the parameters, as a GPU's, trains as one process bitwise when the trainer tells
// it of every change (once a step, and when a caller changes the parameters).
TEST(ModelParallelTrainerTest, ABackendWithItsOwnParameterCopyIsToldOfEveryChange) {
  const config::DlrmConfig c = TableWise(2);
  int refreshes[2] = {0, 0};
  std::atomic<int> made{0};
  const train::TrainerBackendFactory copying = [&](const config::DlrmConfig& config,
                                                   DlrmModel<float>* model, ThreadPool* pool) {
    return std::make_unique<CopyingBackend>(config, model, pool, &refreshes[made++]);
  };
  Engine engine(c);
  NeoCluster cluster(c, 2, train::TrainerDevices{copying, nullptr, nullptr});
  for (const auto& t : cluster.trainers) EXPECT_EQ(t->device(), "copying");
  constexpr int64_t kSteps = 4;
  for (int64_t step = 0; step < kSteps; ++step)
    ASSERT_NO_FATAL_FAILURE(
        ExpectStepEqualsEngine(engine, cluster, MakeTestBatch(c, step, 2 * kPart), "copying"));
  for (int r = 0; r < 2; ++r) EXPECT_EQ(refreshes[r], kSteps) << "rank " << r;
  const OwnedBatch batch = MakeTestBatch(c, 99, kPart);
  std::vector<std::vector<float>> before(2, std::vector<float>(kPart)), after = before;
  auto predict = [&](std::vector<std::vector<float>>* out) {
    const std::vector<std::string> errors =
        cluster.Run([&](int32_t r, train::ModelParallelTrainer& t) {
          t.PredictLogits(batch.view(), (*out)[r].data());
        });
    for (const std::string& e : errors) ASSERT_EQ(e, "");
  };
  predict(&before);
  for (const auto& t : cluster.trainers)
    for (float& v : t->mutable_model().dense_params()) v *= 0.5f;
  predict(&after);
  EXPECT_NE(before[0], after[0]) << "prediction used the stale copy";
  EXPECT_EQ(after[0], after[1]);
}

// The owned shards trained on the trainer's device (owned_shards.h), as a GPU's copy of the
// store: the job trains as one process bitwise, owned() reads the trained rows (copied
// back), and rows a caller writes into the store (a restore) are what the next step trains
// from on both ranks, as with shards trained in the store itself; with row-wise pieces
// (host-held) beside the copied shards too.
void ExpectOwnedShardsCopiedBackAndRefreshed(const config::DlrmConfig& c) {
  const train::OwnedShardsFactory copying = [](const config::DlrmConfig&,
                                               ps::EmbeddingShardStore* store, ThreadPool*) {
    return std::make_unique<CopyingOwnedShards>(store);
  };
  Engine engine(c);
  NeoCluster cluster(c, 2, train::TrainerDevices{nullptr, nullptr, copying}), host(c, 2);
  for (const auto& t : cluster.trainers) EXPECT_EQ(t->owned_device(), "copying");
  for (const auto& t : host.trainers) EXPECT_EQ(t->owned_device(), "cpu");
  constexpr int64_t kSteps = 3;
  for (int64_t step = 0; step < kSteps; ++step) {
    const OwnedBatch global = MakeTestBatch(c, step, 2 * kPart);
    ASSERT_NO_FATAL_FAILURE(ExpectStepEqualsEngine(engine, cluster, global, "copying"));
    std::vector<std::string> errors;
    host.Step(global, &errors);
  }
  ExpectSameParameters(engine, cluster, c, "after training on the copy");
  // A restore's write: every owned row halved, in both jobs.
  for (NeoCluster* job : {&cluster, &host})
    for (const auto& t : job->trainers)
      for (EmbeddingTable<float>& table : t->mutable_owned().mutable_shard_tables())
        for (float& v : table.data()) v *= 0.5f;
  // Read back before any step (a restore, then a checkpoint): the written rows.
  for (int32_t r = 0; r < 2; ++r)
    for (size_t s = 0; s < cluster.trainers[r]->owned().shard_tables().size(); ++s)
      EXPECT_EQ(cluster.trainers[r]->owned().shard_tables()[s].data(),
                host.trainers[r]->owned().shard_tables()[s].data())
          << "rank " << r << " shard " << s << " read the copy's rows over the restore's";
  const OwnedBatch next = MakeTestBatch(c, kSteps, 2 * kPart);
  std::vector<std::string> errors;
  const std::vector<float> got = cluster.Step(next, &errors), want = host.Step(next, &errors);
  for (int32_t r = 0; r < 2; ++r) {
    EXPECT_EQ(errors[r], "");
    EXPECT_EQ(std::memcmp(&got[r], &want[r], sizeof(float)), 0)
        << "rank " << r << " trained from the stale copy: " << got[r] << " vs " << want[r];
    for (size_t s = 0; s < cluster.trainers[r]->owned().shard_tables().size(); ++s)
      EXPECT_EQ(cluster.trainers[r]->owned().shard_tables()[s].data(),
                host.trainers[r]->owned().shard_tables()[s].data())
          << "rank " << r << " shard " << s;
  }
}

TEST(ModelParallelTrainerTest, OwnedShardsOnACopyAreCopiedBackAndRefreshed) {
  ExpectOwnedShardsCopiedBackAndRefreshed(TableWise(2));
  ExpectOwnedShardsCopiedBackAndRefreshed(Mixed(2));
}

// Owned shards on a device that fails once, on one rank, when told to: pooling or checking
// the update throws, as a CUDA error would.
class FailingOwnedShards final : public train::OwnedShards {
 public:
  FailingOwnedShards(ps::EmbeddingShardStore* store, int32_t rank, std::atomic<int>* fail_pool,
                     std::atomic<int>* fail_check)
      : host_(train::MakeHostOwnedShards(store)),
        rank_(rank),
        fail_pool_(*fail_pool),
        fail_check_(*fail_check) {}
  std::string name() const override { return "failing"; }
  void Pool(const ValidatedBatch& batch, float* out) override {
    FailIfTold(fail_pool_);
    host_->Pool(batch, out);
  }
  bool PooledUpdateIsFinite(const ValidatedBatch& batch, const float* d_pooled, float lr,
                            int64_t step) override {
    FailIfTold(fail_check_);
    return host_->PooledUpdateIsFinite(batch, d_pooled, lr, step);
  }
  void ApplyPooledUpdate(const float* d_pooled, float lr, int64_t step) override {
    host_->ApplyPooledUpdate(d_pooled, lr, step);
  }
  void PullState() override {}
  void StoreChanged() override {}

 private:
  void FailIfTold(std::atomic<int>& rank) {
    int mine = rank_;
    if (rank.compare_exchange_strong(mine, -1)) Throw(StatusCode::kInternal, "device lost");
  }
  std::unique_ptr<train::OwnedShards> host_;
  const int32_t rank_;
  std::atomic<int>& fail_pool_;
  std::atomic<int>& fail_check_;
};

// Row-wise pieces beside shards on a device: the device copies the shards its store pools
// (column blocks here), the store trains and serves its pieces on the host, and PullState
// writes back the device's shards only, never its stale copy of a piece over the pieces'
// trained rows (the copy holds none: BoundTables). The job trains as one process bitwise
// and owned() reads every shard's trained rows.
TEST(ModelParallelTrainerTest, RowWisePiecesBesideADeviceCopyEqualOneProcessBitwise) {
  const config::DlrmConfig c = Mixed(2);
  const train::OwnedShardsFactory copying = [](const config::DlrmConfig&,
                                               ps::EmbeddingShardStore* store, ThreadPool*) {
    return std::make_unique<CopyingOwnedShards>(store);
  };
  Engine engine(c);
  NeoCluster cluster(c, 2, train::TrainerDevices{nullptr, nullptr, copying});
  ASSERT_EQ(cluster.trainers[0]->layout().fetched_tables().size(), 1u);
  for (int64_t step = 0; step < 4; ++step) {
    const std::string where = "step " + std::to_string(step);
    ASSERT_NO_FATAL_FAILURE(
        ExpectStepEqualsEngine(engine, cluster, MakeTestBatch(c, step, 2 * kPart), where));
    ExpectSameParameters(engine, cluster, c, where);  // owned(): the copy's rows pulled back
  }
}

// An owner's device failing (pooling, or checking its update) on one rank fails the step on
// every rank at once, naming that rank and the cause (it travels in the exchange: without
// it the others would wait out the timeout), changes nothing, and the step then trains as
// one process does.
TEST(ModelParallelTrainerTest, AnOwnersDeviceFailureFailsEveryRankNamingIt) {
  const config::DlrmConfig c = TableWise(2);
  std::atomic<int> fail_pool{-1}, fail_check{-1}, made{0};
  const train::OwnedShardsFactory failing = [&](const config::DlrmConfig&,
                                                ps::EmbeddingShardStore* store, ThreadPool*) {
    return std::make_unique<FailingOwnedShards>(store, made++, &fail_pool, &fail_check);
  };
  Engine engine(c);
  NeoCluster cluster(c, 2, train::TrainerDevices{nullptr, nullptr, failing});
  ASSERT_NO_FATAL_FAILURE(
      ExpectStepEqualsEngine(engine, cluster, MakeTestBatch(c, 0, 2 * kPart), "before"));
  struct Failure {
    std::atomic<int>* flag;
    int rank;
    std::string expected;
  };
  const Failure failures[] = {
      {&fail_pool, 1, "trainer 1 failed pooling its shards: device lost"},
      {&fail_check, 0, "trainer 0 failed checking its shards' update: device lost"}};
  int64_t step = 1;
  for (const auto& [flag, rank, expected] : failures) {
    flag->store(rank);
    const OwnedBatch global = MakeTestBatch(c, step, 2 * kPart);
    std::vector<std::string> errors;
    const auto start = std::chrono::steady_clock::now();
    cluster.Step(global, &errors);
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10)) << expected;
    for (int32_t r = 0; r < 2; ++r) EXPECT_THAT(errors[r], HasSubstr(expected)) << "rank " << r;
    ExpectSameParameters(engine, cluster, c, "after the failed step " + std::to_string(step));
    ASSERT_NO_FATAL_FAILURE(ExpectStepEqualsEngine(engine, cluster, global, "retried"));
    ++step;
  }
}

TEST(ModelParallelTrainerTest, RefusesPlansItCannotExchangeAndAMismatchedCommunicator) {
  const config::DlrmConfig rows =
      ShardedTestConfig(config::ShardingConfig::TABLE_ROW_WISE, "sgd", "sgd", 2);
  collective::LocalCommunicatorHub hub(2, std::chrono::seconds(1));
  const std::unique_ptr<collective::Communicator> comm = hub.Rank(0);
  ThreadPool pool(1);
  try {
    train::ModelParallelTrainer t(rows, shard::PlanSharding(rows, 2), comm.get(), &pool);
    ADD_FAILURE() << "a TABLE_ROW_WISE plan was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(e.what(), HasSubstr("is sharded TABLE_ROW_WISE"));
  }
  const config::DlrmConfig c = TableWise(3);
  try {
    train::ModelParallelTrainer t(c, shard::PlanSharding(c, 3), comm.get(), &pool);
    ADD_FAILURE() << "a plan of 3 ranks was accepted on a communicator of 2";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(),
                HasSubstr("the plan places shards on 3 ranks but the communicator has 2"));
  }
  config::DlrmConfig hybrid = TableWise(2);
  hybrid.mutable_distributed()->set_mode(config::DistributedConfig::HYBRID);
  config::DlrmConfig cuda = TableWise(2);
  cuda.mutable_device()->set_kind(config::DeviceConfig::CUDA);
  for (const auto& [bad, expected] :
       {std::pair{hybrid,
                  "distributed.mode HYBRID (stale embedding reads) needs embedding servers"},
        std::pair{cuda, "device.kind is CUDA but this trainer was made without device backends"}}) {
    try {
      train::ModelParallelTrainer t(bad, shard::PlanSharding(bad, 2), comm.get(), &pool);
      ADD_FAILURE() << "accepted; expected: " << expected;
    } catch (const Error& e) {
      EXPECT_THAT(e.what(), HasSubstr(expected));
    }
  }
}

}  // namespace
}  // namespace dlrm

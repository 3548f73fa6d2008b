// Sync training with 2 trainers and 2 embedding servers (in-process: threads, a local
// communicator and embedding service) reproduces the single-process engine bitwise: the
// losses of every step, every dense parameter and every embedding row, for each sharding
// type and several optimizer sets.
#include "engine/train/data_parallel_trainer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "engine/config/config.h"
#include "engine/core/philox.h"
#include "engine/core/status.h"
#include "engine/dense/loss.h"
#include "engine/device_backends.h"
#include "engine/engine.h"
#include "engine/shard/planner.h"
#include "tests/support/copying_backend.h"
#include "tests/support/dist_checks.h"
#include "tests/support/dist_cluster.h"
#include "tests/support/dist_config.h"
#include "tests/support/dist_data.h"
#include "tests/support/forging_communicator.h"
#include "tests/support/test_support.h"

namespace dlrm {
namespace {

using namespace ::dlrm::testing;  // the suites' shared helpers
using ::testing::HasSubstr;

using Type = config::ShardingConfig::Type;
constexpr int32_t kServers = 2, kTrainers = 2;
constexpr int64_t kPart = 32, kGlobal = kPart * kTrainers;

OwnedBatch MakeBatch(const config::DlrmConfig& c, int64_t index) {
  return MakeTestBatch(c, index, kGlobal);
}

struct Cluster : InProcessCluster {
  explicit Cluster(const config::DlrmConfig& c, int64_t staleness = 0)
      : InProcessCluster(c, kServers, kTrainers, staleness) {}
};

// One global batch's step on the engine and on the cluster (each rank its part): every
// rank's loss is the engine's, bitwise.
void ExpectStepEqualsEngine(Engine& engine, InProcessCluster& cluster, const config::DlrmConfig& c,
                            int64_t step, const std::string& where) {
  const OwnedBatch global = MakeBatch(c, step);
  const float want = engine.TrainStep(global.view());
  std::vector<std::string> errors;
  const std::vector<float> losses =
      cluster.Step({Part(global, 0, kPart), Part(global, kPart, kGlobal)}, &errors);
  for (int r = 0; r < kTrainers; ++r) {
    ASSERT_EQ(errors[r], "") << where << " rank " << r;
    ASSERT_EQ(std::memcmp(&losses[r], &want, sizeof(float)), 0)
        << where << " step " << step << " rank " << r << ": " << losses[r] << " vs " << want;
  }
}

// Every dense parameter and embedding row of the cluster equals the engine's, bitwise.
void ExpectSameParameters(const Engine& engine, const Cluster& cluster, const config::DlrmConfig& c,
                          const std::string& where) {
  for (const auto& trainer : cluster.trainers)
    ExpectDenseMatchesEngine(engine, trainer->model(), where);
  std::vector<const ps::EmbeddingShardStore*> owners;
  for (const auto& s : cluster.servers) owners.push_back(s.get());
  for (const auto& t : cluster.trainers) owners.push_back(&t->replicas());
  ExpectStoresMatchEngine(engine, c, owners, where);
}

// What each rank's trainer did in RunQueued: the losses of its steps and the errors of
// those that failed, in order.
struct QueuedRun {
  std::vector<std::vector<float>> losses{kTrainers};
  std::vector<std::vector<std::string>> errors{kTrainers};
};

// Each rank, on a thread of its own, keeps up to `depth` of its parts queued (their
// lookups in flight) and steps until its queue is empty; before_step(rank, i) runs before
// its i-th step.
QueuedRun RunQueued(Cluster& cluster, const std::vector<std::vector<OwnedBatch>>& parts,
                    size_t depth, const std::function<void(int, int64_t)>& before_step = {}) {
  QueuedRun run;
  std::vector<std::thread> threads;
  for (int r = 0; r < kTrainers; ++r) {
    threads.emplace_back([&, r] {
      train::DataParallelTrainer& trainer = *cluster.trainers[r];
      size_t next = 0;
      while (next < std::min(depth, parts[r].size())) trainer.Enqueue(parts[r][next++].view());
      for (int64_t i = 0; trainer.queued() > 0; ++i) {
        if (before_step) before_step(r, i);
        try {
          run.losses[r].push_back(trainer.TrainStep());
        } catch (const Error& e) {
          run.errors[r].push_back(e.what());
        }
        if (next < parts[r].size()) trainer.Enqueue(parts[r][next++].view());
      }
    });
  }
  for (auto& t : threads) t.join();
  return run;
}

// Every rank failed one step, with `error`, and its other losses are `want`'s, bitwise.
void ExpectOneFailureAndLosses(const QueuedRun& run, const std::vector<float>& want,
                               const std::string& error) {
  for (int r = 0; r < kTrainers; ++r) {
    ASSERT_EQ(run.errors[r].size(), 1u) << "rank " << r;
    EXPECT_THAT(run.errors[r][0], HasSubstr(error)) << "rank " << r;
    ASSERT_EQ(run.losses[r].size(), want.size()) << "rank " << r;
    for (size_t i = 0; i < want.size(); ++i)
      EXPECT_EQ(std::memcmp(&run.losses[r][i], &want[i], sizeof(float)), 0)
          << "rank " << r << " step " << i + 1 << ": " << run.losses[r][i] << " vs " << want[i];
  }
}

// Each global batch split into the ranks' parts.
std::vector<std::vector<OwnedBatch>> SplitParts(const std::vector<OwnedBatch>& globals) {
  std::vector<std::vector<OwnedBatch>> parts(kTrainers);
  for (const OwnedBatch& g : globals)
    for (int r = 0; r < kTrainers; ++r) parts[r].push_back(Part(g, r * kPart, (r + 1) * kPart));
  return parts;
}

struct Case {
  Type type;
  std::string dense, sparse;
  // Every table's rows: FP32, or 16-bit rounded stochastically (each shard must draw the
  // whole table's random bits; COLUMN_WISE's second block starts at column 4, inside a
  // block of 8 columns that share one Philox call).
  config::TableConfig::Precision precision = config::TableConfig::FP32;
};

std::string CaseName(const Case& c) {
  std::string name =
      std::string(shard::ShardingTypeShortName(c.type)) + "_" + c.dense + "_" + c.sparse;
  if (c.precision != config::TableConfig::FP32)
    name += "_" + config::TableConfig::Precision_Name(c.precision);
  return name;
}

void PrintTo(const Case& c, std::ostream* os) { *os << CaseName(c); }

config::DlrmConfig CaseConfig(const Case& c) {
  return WithTablePrecision(ShardedTestConfig(c.type, c.dense, c.sparse, kServers), c.precision);
}

class DataParallelTrainerTest : public ::testing::TestWithParam<Case> {};

TEST_P(DataParallelTrainerTest, TwoTrainersTwoServersEqualOneProcessBitwise) {
  const Case& param = GetParam();
  const config::DlrmConfig c = CaseConfig(param);
  Engine engine(c);
  Cluster cluster(c);
  const std::string name = CaseName(param);
  for (int64_t step = 0; step < 5; ++step) {
    ASSERT_NO_FATAL_FAILURE(ExpectStepEqualsEngine(engine, cluster, c, step, name));
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
    const std::string last =
        type == config::ShardingConfig::COLUMN_WISE ? "adam" : "rowwise_adagrad";
    cases.push_back({type, "adam", last});
    cases.push_back({type, "adam", last, config::TableConfig::BF16});
  }
  cases.push_back(
      {config::ShardingConfig::COLUMN_WISE, "sgd", "adagrad", config::TableConfig::FP16});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(AllTypes, DataParallelTrainerTest, ::testing::ValuesIn(AllCases()),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return CaseName(info.param);
                         });

// Compressed communication (wire_precision BF16 / FP16): served rows, embedding gradients
// (to servers and, for DATA_PARALLEL tables, between trainers) and dense gradients are
// rounded where they are made, so both trainers hold the same dense parameters bitwise,
// a second cluster repeats the run bitwise, and the losses stay close to (not equal to)
// FP32 training's.
TEST(DataParallelTrainerWire, SixteenBitWiresAreDeterministicAndCloseToFp32) {
  for (Type type : {config::ShardingConfig::ROW_WISE, config::ShardingConfig::DATA_PARALLEL}) {
    for (auto wire : {config::DistributedConfig::BF16, config::DistributedConfig::FP16}) {
      config::DlrmConfig c = ShardedTestConfig(type, "adam", "rowwise_adagrad", kServers);
      Cluster exact(c);
      c.mutable_distributed()->set_wire_precision(wire);
      Engine engine(c);
      Cluster first(c), second(c);
      bool any_differs = false;
      for (int64_t step = 0; step < 5; ++step) {
        const OwnedBatch global = MakeBatch(c, step);
        const float want = engine.TrainStep(global.view());
        const std::vector<OwnedBatch> parts = {Part(global, 0, kPart),
                                               Part(global, kPart, kGlobal)};
        std::vector<std::string> errors;
        const std::vector<float> a = first.Step(parts, &errors);
        ASSERT_EQ(errors, std::vector<std::string>(kTrainers, ""));
        const std::vector<float> b = second.Step(parts, &errors);
        EXPECT_EQ(a, b) << "step " << step;
        exact.Step(parts, &errors);
        EXPECT_EQ(a[0], a[1]);
        EXPECT_NEAR(a[0], want, 2e-3) << "step " << step;
        any_differs = any_differs || a[0] != want;
      }
      EXPECT_TRUE(any_differs) << "the 16-bit wire changed nothing";
      // The float data travels in half the bytes; ids and counts do not shrink.
      const auto& half = first.trainers[0]->wire_bytes();
      const auto& full = exact.trainers[0]->wire_bytes();
      EXPECT_EQ(half.steps, 5);
      EXPECT_LT(half.sent, full.sent * 0.8) << half.sent << " vs " << full.sent;
      EXPECT_LT(half.received, full.received * 0.8) << half.received << " vs " << full.received;
      EXPECT_GT(half.received, full.received / 2);
      EXPECT_EQ(first.trainers[0]->model().dense_params(),
                first.trainers[1]->model().dense_params());
      EXPECT_EQ(first.trainers[0]->model().dense_params(),
                second.trainers[0]->model().dense_params());
    }
  }
}

// A bad part on one trainer fails the step on both with the same message, and nothing
// changes anywhere: the next good step still matches the engine.
TEST(DataParallelTrainerErrors, BadPartFailsEveryRankAndChangesNothing) {
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
    EXPECT_NE(errors[r].find("trainer 1's part"), std::string::npos) << errors[r];
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

// Finding 3 (issue 17) with several trainers: Adam's step size at learning rate FLT_MAX
// overflows, so the dense update of the first step would write infinities. Every rank
// refuses the step before anything is written (dense, replicas, servers), and the next
// step at a sane rate trains as the engine's first.
TEST(DataParallelTrainerErrors, AnUpdateThatWouldOverflowFailsEveryRankAndChangesNothing) {
  config::DlrmConfig c =
      ShardedTestConfig(config::ShardingConfig::DATA_PARALLEL, "adam", "adagrad", kServers);
  const float sane = c.dense_optimizer().learning_rate();
  c.mutable_dense_optimizer()->set_learning_rate(std::numeric_limits<float>::max());
  Cluster cluster(c);
  const OwnedBatch global = MakeBatch(c, 0);
  std::vector<std::string> errors;
  cluster.Step({Part(global, 0, kPart), Part(global, kPart, kGlobal)}, &errors);
  for (int r = 0; r < kTrainers; ++r)
    EXPECT_NE(errors[r].find("would make a parameter or an optimizer state non-finite"),
              std::string::npos)
        << "rank " << r << ": " << errors[r];
  EXPECT_EQ(cluster.trainers[0]->step(), 0);
  c.mutable_dense_optimizer()->set_learning_rate(sane);
  Engine engine(c);  // the same initial state
  ExpectSameParameters(engine, cluster, c, "after the refused step");
}

// An in-process service whose updates may take at most `limit` bytes (a stand-in for the
// transport's max_message_bytes).
class LimitedService : public ps::EmbeddingService {
 public:
  explicit LimitedService(ps::EmbeddingService* inner) : inner_(inner) {}
  std::unique_ptr<ps::PendingLookup> SubmitLookup(int32_t owner, int64_t step,
                                                  std::vector<ps::ShardRows> request) override {
    return inner_->SubmitLookup(owner, step, std::move(request));
  }
  void Update(int32_t owner, int32_t rank, int64_t step, float lr,
              std::vector<ps::FeatureUpdate> part) override {
    inner_->Update(owner, rank, step, lr, std::move(part));
  }
  void WaitUntilApplied(int64_t step) override { inner_->WaitUntilApplied(step); }
  int64_t max_update_bytes() const override { return limit; }
  int64_t limit = 64;

 private:
  ps::EmbeddingService* inner_;
};

// The cluster's trainers made again, over communicators of a new hub (wrapped by `wrap`,
// none: as they are) and `service`: the same plan, config and pools. They borrow hub and
// service: ForgetTrainers before either goes.
void RemakeTrainers(const config::DlrmConfig& c, Cluster* cluster,
                    collective::LocalCommunicatorHub* hub, ps::EmbeddingService* service,
                    const std::function<std::unique_ptr<collective::Communicator>(
                        std::unique_ptr<collective::Communicator>)>& wrap = nullptr) {
  for (int r = 0; r < kTrainers; ++r) {
    cluster->comms[r] = wrap ? wrap(hub->Rank(r)) : hub->Rank(r);
    cluster->trainers[r] = std::make_unique<train::DataParallelTrainer>(
        c, cluster->plan, cluster->comms[r].get(), service, cluster->pools[r].get());
  }
}

void ForgetTrainers(Cluster* cluster) {
  cluster->trainers.clear();
  cluster->comms.clear();
}

// kBatches global batches of c, and the engine's losses on all but batch `bad` (which
// the job's step refuses), in order.
std::vector<OwnedBatch> BatchesAndLosses(const config::DlrmConfig& c, Engine* engine,
                                         int64_t batches, int64_t bad, std::vector<float>* want) {
  std::vector<OwnedBatch> globals;
  for (int64_t i = 0; i < batches; ++i) {
    globals.push_back(MakeBatch(c, i));
    if (i != bad) want->push_back(engine->TrainStep(globals.back().view()));
  }
  return globals;
}

// A part whose update for a server is larger than one message may carry fails the step on
// every rank before anything is applied (dense, replicas, servers), naming the sizes,
// rather than after the dense update when it is sent.
TEST(DataParallelTrainerErrors, AnUpdateTooLargeToSendFailsEveryRankAndChangesNothing) {
  const config::DlrmConfig c =
      ShardedTestConfig(config::ShardingConfig::TABLE_WISE, "adam", "adagrad", kServers);
  Engine engine(c);
  Cluster cluster(c);
  LimitedService limited(cluster.service.get());
  collective::LocalCommunicatorHub hub(kTrainers, std::chrono::seconds(20));
  RemakeTrainers(c, &cluster, &hub, &limited);
  const OwnedBatch global = MakeBatch(c, 0);
  std::vector<std::string> errors;
  cluster.Step({Part(global, 0, kPart), Part(global, kPart, kGlobal)}, &errors);
  for (int r = 0; r < kTrainers; ++r)
    EXPECT_THAT(errors[r], HasSubstr("more than one message may carry (64): send smaller parts"))
        << "rank " << r;
  EXPECT_EQ(cluster.trainers[0]->step(), 0);
  ExpectSameParameters(engine, cluster, c, "after the refused step");
  limited.limit = int64_t{1} << 30;
  const float want = engine.TrainStep(global.view());
  const auto losses = cluster.Step({Part(global, 0, kPart), Part(global, kPart, kGlobal)}, &errors);
  for (int r = 0; r < kTrainers; ++r) {
    ASSERT_EQ(errors[r], "") << "rank " << r;
    EXPECT_EQ(std::memcmp(&losses[r], &want, sizeof(float)), 0) << "rank " << r;
  }
  ExpectSameParameters(engine, cluster, c, "after a good step");
  ForgetTrainers(&cluster);
}

// Contributions that do not decode (a peer's bytes cut short) fail the step on the ranks
// that read them; the parts queued behind it are renumbered as after any failed step, so
// they train as the engine's next steps instead of waiting for a step that never comes.
TEST(DataParallelTrainerPipeline, AnUndecodableContributionFailsItsStepAndTheQueueTrains) {
  const config::DlrmConfig c =
      ShardedTestConfig(config::ShardingConfig::TABLE_WISE, "sgd", "adagrad", kServers);
  Engine engine(c);
  Cluster cluster(c);
  collective::LocalCommunicatorHub hub(kTrainers, std::chrono::seconds(20));
  std::vector<ForgingCommunicator*> forging;
  RemakeTrainers(c, &cluster, &hub, cluster.service.get(), [&](auto comm) {
    auto forged = std::make_unique<ForgingCommunicator>(std::move(comm));
    forging.push_back(forged.get());
    return forged;
  });
  constexpr int64_t kBatches = 4, kBad = 1;
  std::vector<float> want;
  const std::vector<OwnedBatch> globals = BatchesAndLosses(c, &engine, kBatches, kBad, &want);
  // Every part queued, its lookups in flight; at step kBad every rank receives the other's
  // contribution cut short.
  const QueuedRun run = RunQueued(cluster, SplitParts(globals), kBatches, [&](int r, int64_t i) {
    if (i != kBad) return;
    forging[r]->forge_gathered = [r](std::vector<std::string>* all) {
      (*all)[1 - r].resize((*all)[1 - r].size() / 2);
    };
  });
  ASSERT_NO_FATAL_FAILURE(ExpectOneFailureAndLosses(run, want, "trainer exchange"));
  cluster.service->WaitUntilApplied(cluster.trainers[0]->step());
  ExpectSameParameters(engine, cluster, c, "after the queue");
  ForgetTrainers(&cluster);
}

// Checkpoint restores set the step; parts queued would then train at other steps.
TEST(DataParallelTrainerPipeline, SetStepRefusesQueuedPartsAndNegativeSteps) {
  const config::DlrmConfig c =
      ShardedTestConfig(config::ShardingConfig::TABLE_WISE, "sgd", "sgd", kServers);
  Cluster cluster(c);
  train::DataParallelTrainer& t = *cluster.trainers[0];
  ExpectError([&] { t.set_step(-1); }, StatusCode::kInvalidArgument,
              "sync trainer: step must be >= 0, got -1");
  const OwnedBatch part = Part(MakeBatch(c, 0), 0, kPart);
  t.Enqueue(part.view());
  ExpectError([&] { t.set_step(5); }, StatusCode::kFailedPrecondition,
              "sync trainer: set_step with 1 parts queued");
  EXPECT_EQ(t.step(), 0);
  EXPECT_EQ(t.queued(), 1u);
}

// Pipelining: each trainer keeps three parts queued (their lookups in flight) and the
// result is still the engine's, bitwise; a bad part in the middle of the queue fails its
// step on both ranks and the parts queued behind it train as the next step. Prediction
// and evaluation then match the engine's exactly.
TEST(DataParallelTrainerPipeline, QueuedPartsTrainLikeOneProcess) {
  const config::DlrmConfig c =
      ShardedTestConfig(config::ShardingConfig::TABLE_ROW_WISE, "adagrad", "adagrad", kServers);
  Engine engine(c);
  Cluster cluster(c);
  constexpr int64_t kBatches = 7, kBad = 3, kDepth = 3;
  std::vector<float> want;
  const std::vector<OwnedBatch> globals = BatchesAndLosses(c, &engine, kBatches, kBad, &want);
  std::vector<std::vector<OwnedBatch>> parts = SplitParts(globals);
  parts[1][kBad].ids[0] = 10'000;  // outside every table
  ASSERT_NO_FATAL_FAILURE(ExpectOneFailureAndLosses(RunQueued(cluster, parts, kDepth), want,
                                                    "step 4: trainer 1's part"));
  cluster.service->WaitUntilApplied(cluster.trainers[0]->step());
  ExpectSameParameters(engine, cluster, c, "after the pipelined steps");

  const OwnedBatch eval = MakeBatch(c, 100);
  std::vector<float> logits(kGlobal), probabilities(kGlobal);
  cluster.trainers[1]->PredictLogits(eval.view(), logits.data());
  engine.Predict(eval.view(), probabilities.data(), kGlobal);
  for (int64_t i = 0; i < kGlobal; ++i)
    EXPECT_EQ(StableSigmoid(logits[i]), probabilities[i]) << "sample " << i;
  const EvalResult got = cluster.trainers[0]->Evaluate({eval.view()});
  const EvalResult expected = engine.Evaluate({eval.view()});
  EXPECT_EQ(got.auc, expected.auc);
  EXPECT_EQ(got.log_loss, expected.log_loss);
  EXPECT_EQ(got.num_samples, kGlobal);
  // A bad batch is refused by name.
  OwnedBatch bad = eval;
  bad.ids[0] = -1;
  try {
    cluster.trainers[0]->Evaluate({eval.view(), bad.view()});
    ADD_FAILURE() << "a bad evaluation batch was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("batches[1]"), std::string::npos) << e.what();
  }
}

// A step whose parts read no rows of a server still sends it their updates; each trainer
// first looks up there (an empty lookup), so the update never arrives before the server
// applied the step before it (which the server refuses, failing the job). Sync, with a
// slow server, and without waiting for the updates between steps.
TEST(DataParallelTrainerPipeline, AStepThatReadsNoRowsOfAServerStillTrainsLikeOneProcess) {
  const config::DlrmConfig c =
      ShardedTestConfig(config::ShardingConfig::TABLE_WISE, "sgd", "sgd", kServers);
  Engine engine(c);
  Cluster cluster(c);
  cluster.service->set_apply_delay(std::chrono::milliseconds(50));
  for (int64_t step = 0; step < 4; ++step) {
    OwnedBatch global = MakeBatch(c, step);
    if (step % 2 == 1) {  // every bag empty: no rows read anywhere
      std::fill(global.lengths.begin(), global.lengths.end(), 0);
      global.ids.clear();
      global.weights.clear();
    }
    const float want = engine.TrainStep(global.view());
    std::vector<std::string> errors;
    const std::vector<float> losses = cluster.Step(
        {Part(global, 0, kPart), Part(global, kPart, kGlobal)}, &errors, /*wait_applied=*/false);
    for (int r = 0; r < kTrainers; ++r) {
      ASSERT_EQ(errors[r], "") << "step " << step << " rank " << r;
      EXPECT_EQ(std::memcmp(&losses[r], &want, sizeof(float)), 0) << "step " << step;
    }
  }
  cluster.service->WaitUntilApplied(cluster.trainers[0]->step());
  ExpectSameParameters(engine, cluster, c, "after the steps without rows");
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

// Trainers whose backend keeps its own copy of the parameters train as one process, bitwise,
// refreshing it once a step (after each dense update) and after a caller changed the
// parameters (a restore); prediction sees the changed ones. With a notification missing,
// the copy would lag a step and the losses would differ from the engine's.
TEST(DataParallelTrainerDevice, ABackendWithItsOwnParameterCopyIsToldOfEveryChange) {
  const config::DlrmConfig c =
      ShardedTestConfig(config::ShardingConfig::TABLE_WISE, "adagrad", "rowwise_adagrad", kServers);
  int refreshes[kTrainers] = {0, 0};
  std::atomic<int> made{0};
  const train::TrainerBackendFactory copying = [&](const config::DlrmConfig& config,
                                                   DlrmModel<float>* model, ThreadPool* pool) {
    return std::make_unique<CopyingBackend>(config, model, pool, &refreshes[made++]);
  };
  Engine engine(c);
  InProcessCluster cluster(c, kServers, kTrainers, 0, copying);
  constexpr int64_t kSteps = 4;
  for (int64_t step = 0; step < kSteps; ++step)
    ASSERT_NO_FATAL_FAILURE(ExpectStepEqualsEngine(engine, cluster, c, step, "copying"));
  for (int r = 0; r < kTrainers; ++r) EXPECT_EQ(refreshes[r], kSteps) << "rank " << r;
  // A caller changes the parameters (as a restore does): predictions follow at once.
  const OwnedBatch batch = MakeBatch(c, 99);
  std::vector<float> before(kGlobal), after(kGlobal);
  cluster.trainers[0]->PredictLogits(batch.view(), before.data());
  for (float& v : cluster.trainers[0]->mutable_model().dense_params()) v *= 0.5f;
  cluster.trainers[0]->PredictLogits(batch.view(), after.data());
  EXPECT_NE(before, after) << "prediction used the stale copy";
  // The engine after the same steps, its dense parameters halved alike, predicts the same.
  std::vector<float> want(kGlobal);
  Engine halved(c);
  for (int64_t step = 0; step < kSteps; ++step) halved.TrainStep(MakeBatch(c, step).view());
  for (const DenseParamInfo& p : cluster.trainers[0]->model().dense_param_infos()) {
    std::vector<float> values(p.size);
    halved.ReadParameter(p.name, values.data(), static_cast<int64_t>(p.size));
    for (float& v : values) v *= 0.5f;
    halved.WriteParameter(p.name, values.data(), static_cast<int64_t>(p.size));
  }
  halved.Predict(batch.view(), want.data(), kGlobal);
  std::vector<float> got(kGlobal);
  for (int64_t i = 0; i < kGlobal; ++i) got[i] = StableSigmoid(after[i]);
  EXPECT_EQ(got, want);
}

// A trainer's device (trainer_backend.h): device.kind CUDA is never trained on the CPU. A
// trainer made without device backends (a host of the train layer alone) refuses it by
// name; with the engine's (device_backends.h) it is refused naming why no GPU can be used
// here, or trains on the GPU where there is one (cuda_trainer_test compares it with the
// CPU).
TEST(DataParallelTrainerDevice, ACudaTrainerIsRefusedNamingTheCauseOrTrainsOnTheGpu) {
  config::DlrmConfig c =
      ShardedTestConfig(config::ShardingConfig::TABLE_WISE, "sgd", "sgd", kServers);
  c.mutable_device()->set_kind(config::DeviceConfig::CUDA);
  try {
    Cluster cluster(c);
    FAIL() << "a CUDA trainer was made without device backends";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), StatusCode::kFailedPrecondition) << e.what();
    EXPECT_THAT(e.what(), ::testing::HasSubstr("device.kind is CUDA but this trainer was made "
                                               "without device backends"));
  }
  std::unique_ptr<InProcessCluster> gpu;
  try {
    gpu = std::make_unique<InProcessCluster>(c, kServers, kTrainers, 0,
                                             BuiltTrainerDevices().backend);
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), StatusCode::kFailedPrecondition) << e.what();
    EXPECT_THAT(e.what(), ::testing::ContainsRegex("built without CUDA|no usable CUDA device|"
                                                   "cannot open cuBLASLt"));
  }
  if (gpu) {
    EXPECT_EQ(gpu->trainers[0]->device(), "cuda:0");
    const OwnedBatch global = MakeBatch(c, 0);
    std::vector<std::string> errors;
    gpu->Step({Part(global, 0, kPart), Part(global, kPart, kGlobal)}, &errors);
    EXPECT_EQ(errors, std::vector<std::string>(kTrainers, ""));
  }
  c.mutable_device()->set_kind(config::DeviceConfig::CPU);
  Cluster cpu(c);  // the same config on the CPU trains
  EXPECT_EQ(cpu.trainers[0]->device(), "cpu");
}

}  // namespace
}  // namespace dlrm

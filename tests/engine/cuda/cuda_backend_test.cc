// The Engine on a CUDA device (engine/cuda/backend.h) against the same Engine on the CPU
// (issue 13's parity points): predictions from the same weights, after a CPU checkpoint is
// loaded and after a parameter is written (within 1e-5: the GEMMs' order is cuBLASLt's);
// 200 training steps with SGD and with row-wise Adagrad (losses within 1e-4 relative,
// final predictions within 1e-4); bitwise equal parameters run to run on the GPU; a
// checkpoint trained on the GPU predicting on the CPU within 1e-5; a quantized serving
// export predicting on both alike. And the step's
// machinery: CUDA graph replays equal eager steps bitwise, the asynchronous path (which
// copies the next batch in during a step) equals synchronous steps bitwise, and a diverged
// step changes nothing on the device, replayed or not. Reported SKIPPED where there is no
// GPU (engine_test covers that case).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "engine/config/config.h"
#include "engine/core/philox.h"
#include "engine/core/status.h"
#include "engine/cuda/device.h"
#include "engine/cuda/device_tables.h"
#include "engine/embedding/dynamic_rows.h"
#include "engine/embedding/sparse_optimizer.h"
#include "engine/engine.h"
#include "tests/support/cuda_support.h"
#include "tests/support/test_support.h"

namespace dlrm {
namespace {

config::DlrmConfig WithDevice(config::DlrmConfig config, config::DeviceConfig::Kind kind) {
  config.mutable_device()->set_kind(kind);
  return config;
}

std::vector<float> Predict(const Engine& e, const OwnedBatch& batch) {
  std::vector<float> p(batch.batch_size);
  e.Predict(batch.view(), p.data(), batch.batch_size);
  return p;
}

TEST(CudaBackendTest, PredictsAsTheCpuDoesFromTheSameWeightsAndCheckpoints) {
  SKIP_WITHOUT_GPU();
  for (const auto interaction : {config::ModelConfig::DOT, config::ModelConfig::CAT}) {
    SCOPED_TRACE(config::ModelConfig::Interaction_Name(interaction));
    config::DlrmConfig config = ParseConfigText(testing::SmallConfigText("", 1, 8));
    config.mutable_model()->set_interaction(interaction);
    Engine cpu(WithDevice(config, config::DeviceConfig::CPU));
    Engine gpu(WithDevice(config, config::DeviceConfig::CUDA));
    const OwnedBatch batch = testing::SmallBatch(64, 3, /*weighted=*/true);
    testing::ExpectAllNear(Predict(gpu, batch), Predict(cpu, batch), 1e-5f, "predictions");
    for (uint64_t s = 0; s < 20; ++s) cpu.TrainStep(testing::SmallBatch(32, s).view());
    const std::string path = testing::TempDir("cuda_backend") + "/cpu.ckpt";
    cpu.Save(path);
    gpu.Load(path);  // PushState: the device takes the trained weights over
    testing::ExpectAllNear(Predict(gpu, batch), Predict(cpu, batch), 1e-5f, "predictions");
    const ParameterInfo top = cpu.Parameters()[cpu.Parameters().size() - 2];
    std::vector<float> values(top.size(), 0.01f);
    cpu.WriteParameter(top.name, values.data(), top.size());
    gpu.WriteParameter(top.name, values.data(), top.size());
    testing::ExpectAllNear(Predict(gpu, batch), Predict(cpu, batch), 1e-5f, "predictions");
    EXPECT_EQ(gpu.step(), 20);
  }
}

const char* const kOptimizers[] = {
    "dense_optimizer { sgd {} learning_rate: 0.1 } sparse_optimizer { sgd {} learning_rate: 0.1 }",
    "dense_optimizer { adagrad {} learning_rate: 0.05 } "
    "sparse_optimizer { rowwise_adagrad {} learning_rate: 0.05 }"};

Engine MakeEngine(const char* optimizers, config::DeviceConfig::Kind kind) {
  return Engine(WithDevice(ParseConfigText(testing::SmallConfigText(optimizers, 1, 8)), kind));
}

// Trains both engines `steps` steps on the same batches: losses within `tol` relative at
// every step, predictions within `tol` after.
void TrainAlike(Engine& cpu, Engine& gpu, int steps, float tol = 1e-4f) {
  for (uint64_t s = 0; s < static_cast<uint64_t>(steps); ++s) {
    const OwnedBatch batch = testing::SmallBatch(64, s, /*weighted=*/s % 2 == 0);
    const float want = cpu.TrainStep(batch.view());
    const float got = gpu.TrainStep(batch.view());
    ASSERT_NEAR(got, want, tol * std::fabs(want)) << "step " << s;
  }
  const OwnedBatch test = testing::SmallBatch(256, 1000);
  testing::ExpectAllNear(Predict(gpu, test), Predict(cpu, test), tol, "predictions");
  EXPECT_EQ(gpu.step(), steps);
}

// Every table's rows in `precision`, narrowed as `rounding` says.
config::DlrmConfig WithHalfTables(config::DlrmConfig config,
                                  config::TableConfig::Precision precision,
                                  config::TableConfig::Rounding rounding) {
  for (auto& table : *config.mutable_model()->mutable_tables()) {
    table.set_precision(precision);
    table.set_rounding(rounding);
  }
  return config;
}

TEST(CudaBackendTest, SixteenBitTablesTrainAsTheCpuDoesAndCheckpointAlike) {
  SKIP_WITHOUT_GPU();
  const struct {
    config::TableConfig::Precision precision;
    config::TableConfig::Rounding rounding;
  } cases[] = {{config::TableConfig::BF16, config::TableConfig::NEAREST},
               {config::TableConfig::FP16, config::TableConfig::STOCHASTIC}};
  for (const auto& c : cases) {
    SCOPED_TRACE(config::TableConfig::Precision_Name(c.precision));
    const config::DlrmConfig config = WithHalfTables(
        ParseConfigText(testing::SmallConfigText(kOptimizers[1], 1, 8)), c.precision, c.rounding);
    Engine cpu(WithDevice(config, config::DeviceConfig::CPU));
    Engine gpu(WithDevice(config, config::DeviceConfig::CUDA));
    // The rows start the same; the GEMMs' order differs, so an update near a rounding
    // boundary may round the other way: 16-bit resolution, not fp32's.
    TrainAlike(cpu, gpu, 100, 5e-3f);
    const std::string path = testing::TempDir("cuda_backend") + "/half.ckpt";
    gpu.Save(path);  // PullState: the 16-bit rows come back as they are
    Engine restored(WithDevice(config, config::DeviceConfig::CPU));
    restored.Load(path);
    const OwnedBatch test = testing::SmallBatch(256, 2000);
    testing::ExpectAllNear(Predict(restored, test), Predict(gpu, test), 1e-5f, "predictions");
  }
}

TEST(CudaBackendTest, TrainsAsTheCpuDoesFor200Steps) {
  SKIP_WITHOUT_GPU();
  for (const char* optimizers : kOptimizers) {
    SCOPED_TRACE(optimizers);
    Engine cpu = MakeEngine(optimizers, config::DeviceConfig::CPU);
    Engine gpu = MakeEngine(optimizers, config::DeviceConfig::CUDA);
    TrainAlike(cpu, gpu, 200);
  }
}

// SmallConfigText's model with DCNv2's cross network: 2 layers of `rank` (0: full rank).
Engine MakeDcnEngine(
    const char* optimizers, int rank, config::DeviceConfig::Kind kind,
    config::DeviceConfig::MatmulPrecision precision = config::DeviceConfig::HIGHEST) {
  config::DlrmConfig config = ParseConfigText(testing::SmallConfigText(optimizers, 1, 8));
  config.mutable_model()->set_interaction(config::ModelConfig::DCN);
  config.mutable_model()->mutable_dcn()->set_num_layers(2);
  config.mutable_model()->mutable_dcn()->set_rank(rank);
  config.mutable_device()->set_matmul_precision(precision);
  return Engine(WithDevice(config, kind));
}

TEST(CudaBackendTest, DotWithSelfInteractionTrainsAsTheCpuDoes) {
  SKIP_WITHOUT_GPU();
  config::DlrmConfig config = ParseConfigText(testing::SmallConfigText(kOptimizers[1], 1, 8));
  config.mutable_model()->set_dot_self_interaction(true);
  Engine cpu(WithDevice(config, config::DeviceConfig::CPU));
  Engine gpu(WithDevice(config, config::DeviceConfig::CUDA));
  TrainAlike(cpu, gpu, 100);
}

TEST(CudaBackendTest, TheCrossNetworkTrainsAsTheCpuDoesFor200Steps) {
  SKIP_WITHOUT_GPU();
  for (const int rank : {4, 0}) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    Engine cpu = MakeDcnEngine(kOptimizers[1], rank, config::DeviceConfig::CPU);
    Engine gpu = MakeDcnEngine(kOptimizers[1], rank, config::DeviceConfig::CUDA);
    const OwnedBatch probe = testing::SmallBatch(64, 999, true);
    testing::ExpectAllNear(Predict(gpu, probe), Predict(cpu, probe), 1e-5f, "initial predictions");
    TrainAlike(cpu, gpu, 200);
    // The cross layers' own parameters moved as the CPU's did.
    for (const ParameterInfo& p : cpu.Parameters()) {
      if (p.name.rfind("cross.", 0) != 0) continue;
      std::vector<float> c(p.size()), g(p.size());
      cpu.ReadParameter(p.name, c.data(), p.size());
      gpu.ReadParameter(p.name, g.data(), p.size());
      testing::ExpectAllNear(g, c, 1e-4f, p.name.c_str());
    }
  }
}

std::vector<std::vector<float>> AllParameters(const Engine& e) {
  std::vector<std::vector<float>> all;
  for (const ParameterInfo& p : e.Parameters()) {
    all.emplace_back(p.size());
    e.ReadParameter(p.name, all.back().data(), p.size());
  }
  return all;
}

// Every parameter array of a equals b's bit for bit.
void ExpectBitwise(const std::vector<std::vector<float>>& a,
                   const std::vector<std::vector<float>>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t p = 0; p < a.size(); ++p)
    EXPECT_EQ(std::memcmp(a[p].data(), b[p].data(), a[p].size() * 4), 0) << "parameter " << p;
}

TEST(CudaBackendTest, RepeatsBitwiseRunToRun) {
  SKIP_WITHOUT_GPU();
  std::vector<std::vector<float>> first;
  for (int run = 0; run < 2; ++run) {
    Engine gpu = MakeEngine(kOptimizers[1], config::DeviceConfig::CUDA);
    for (uint64_t s = 0; s < 50; ++s) gpu.TrainStep(testing::SmallBatch(64, s, true).view());
    if (run == 0) {
      first = AllParameters(gpu);
      continue;
    }
    ExpectBitwise(AllParameters(gpu), first);
  }
}

// A serving export with INT8 / INT4 tables (what the Go Predictor loads) predicts on the
// GPU as on the CPU: the codes are pooled on the device (bitwise, cuda_pooled_embedding_
// test), the MLPs within cuBLASLt's rounding.
TEST(CudaBackendTest, QuantizedServingTablesPredictAsOnTheCpu) {
  SKIP_WITHOUT_GPU();
  Engine trained = MakeEngine(kOptimizers[1], config::DeviceConfig::CPU);
  for (uint64_t s = 0; s < 30; ++s) trained.TrainStep(testing::SmallBatch(64, s).view());
  const OwnedBatch test = testing::SmallBatch(256, 3000, /*weighted=*/true);
  for (const auto precision : {config::TableConfig::INT8, config::TableConfig::INT4}) {
    SCOPED_TRACE(config::TableConfig::Precision_Name(precision));
    const std::string path = testing::TempDir("cuda_backend") + "/serving.dlrm";
    trained.Export(path, precision);
    const std::unique_ptr<Engine> cpu = Engine::FromCheckpoint(path, "cpu");
    const std::unique_ptr<Engine> gpu = Engine::FromCheckpoint(path, "cuda");
    testing::ExpectAllNear(Predict(*gpu, test), Predict(*cpu, test), 1e-5f, "predictions");
  }
}

TEST(CudaBackendTest, ACheckpointTrainedOnTheGpuPredictsOnTheCpu) {
  SKIP_WITHOUT_GPU();
  Engine gpu = MakeEngine(kOptimizers[1], config::DeviceConfig::CUDA);
  for (uint64_t s = 0; s < 50; ++s) gpu.TrainStep(testing::SmallBatch(64, s).view());
  const std::string path = testing::TempDir("cuda_backend") + "/gpu.ckpt";
  gpu.Save(path);  // PullState: the device's parameters and optimizer state
  Engine cpu = MakeEngine(kOptimizers[1], config::DeviceConfig::CPU);
  cpu.Load(path);
  EXPECT_EQ(cpu.step(), 50);
  const OwnedBatch test = testing::SmallBatch(256, 2000);
  testing::ExpectAllNear(Predict(cpu, test), Predict(gpu, test), 1e-5f, "predictions");
  // Created from the checkpoint alone (its config names the GPU) on the CPU by name.
  const std::unique_ptr<Engine> restored = Engine::FromCheckpoint(path, "cpu");
  EXPECT_EQ(Predict(*restored, test), Predict(cpu, test));
  // And back: the CPU continues from the GPU's optimizer state as well.
  gpu.Load(path);
  testing::ExpectAllNear(Predict(gpu, test), Predict(cpu, test), 1e-5f, "predictions");
}

// A batch of SmallBatch's model whose shape (two ids per bag) is the same for every salt,
// so that its steps replay one CUDA graph.
OwnedBatch FixedShapeBatch(int64_t n, uint64_t salt) {
  OwnedBatch b = testing::SmallBatch(n, salt);
  const CounterRng rng(salt, 7, 0);
  const int64_t rows[3] = {40, 25, 40};
  b.lengths.assign(static_cast<size_t>(3 * n), 2);
  b.ids.clear();
  uint64_t draw = 0;
  for (int f = 0; f < 3; ++f)
    for (int64_t i = 0; i < 2 * n; ++i) {
      const double u = rng.Uniform(draw++);
      b.ids.push_back(static_cast<int64_t>(u * u * static_cast<double>(rows[f])));
      b.weights.push_back(static_cast<float>(0.5 + rng.Uniform(draw++)));
    }
  return b;
}

// Steps 0..59: fixed shapes (replayed), with other shapes between (eager; graphs dropped).
OwnedBatch MixedBatch(uint64_t s) {
  return s % 17 == 16 ? testing::SmallBatch(64, s, true) : FixedShapeBatch(64, s);
}

Engine MakeGraphEngine(bool graph) {
  config::DlrmConfig c = WithDevice(ParseConfigText(testing::SmallConfigText(kOptimizers[1], 1, 8)),
                                    config::DeviceConfig::CUDA);
  c.mutable_device()->set_cuda_graph(graph);
  return Engine(c);
}

TEST(CudaBackendTest, GraphReplaysEqualEagerStepsBitwise) {
  SKIP_WITHOUT_GPU();
  Engine eager = MakeGraphEngine(false), graph = MakeGraphEngine(true);
  for (uint64_t s = 0; s < 60; ++s) {
    const OwnedBatch batch = MixedBatch(s);
    const float want = eager.TrainStep(batch.view());
    const float got = graph.TrainStep(batch.view());
    ASSERT_EQ(std::memcmp(&got, &want, sizeof got), 0) << "step " << s;
  }
  ExpectBitwise(AllParameters(graph), AllParameters(eager));
}

TEST(CudaBackendTest, AsyncStepsCopyingAheadEqualSynchronousSteps) {
  SKIP_WITHOUT_GPU();
  Engine sync = MakeGraphEngine(true), async = MakeGraphEngine(true);
  std::vector<OwnedBatch> batches;
  for (uint64_t s = 0; s < 60; ++s) batches.push_back(MixedBatch(s));
  std::vector<int64_t> tickets;
  for (const OwnedBatch& b : batches) tickets.push_back(async.SubmitTrainStep(b.view()));
  for (size_t i = 0; i < batches.size(); ++i) {
    const float want = sync.TrainStep(batches[i].view());
    const float got = async.WaitTrainStep(tickets[i]);
    ASSERT_EQ(std::memcmp(&got, &want, sizeof got), 0) << "step " << i;
  }
  ExpectBitwise(AllParameters(async), AllParameters(sync));
}

TEST(CudaBackendTest, ADivergedStepChangesNothingReplayedOrNot) {
  SKIP_WITHOUT_GPU();
  for (const bool graph : {false, true}) {
    SCOPED_TRACE(graph ? "graph" : "eager");
    Engine gpu = MakeGraphEngine(graph);
    for (uint64_t s = 0; s < 5; ++s) gpu.TrainStep(FixedShapeBatch(64, s).view());
    gpu.SetLearningRate(LrTarget::kAll, 1e30f);
    bool diverged = false;
    for (uint64_t s = 5; s < 10 && !diverged; ++s) {
      const auto before = AllParameters(gpu);
      const int64_t step = gpu.step();
      try {
        gpu.TrainStep(FixedShapeBatch(64, s).view());
      } catch (const Error& e) {
        diverged = true;
        EXPECT_EQ(e.code(), StatusCode::kFailedPrecondition);
        EXPECT_NE(std::string(e.what()).find("diverged"), std::string::npos) << e.what();
        ExpectBitwise(AllParameters(gpu), before);
        EXPECT_EQ(gpu.step(), step);
      }
    }
    EXPECT_TRUE(diverged);
  }
}

// Weights of 3e38 overflow the forward of any batch with dense values but not of one whose
// dense values are 0: both engines take such a step (the host copy stale again, as in
// training), then `engine` alone the diverging `batch` (FAILED_PRECONDITION), then both get
// their weights back, so `engine` must go on as `control`, which never saw `batch`.
void TakeADivergedStep(Engine& engine, Engine& control, const OwnedBatch& batch) {
  const ParameterInfo first = engine.Parameters()[0];  // bottom_mlp.0.weight
  std::vector<float> kept(first.size()), huge(first.size(), 3e38f);
  engine.ReadParameter(first.name, kept.data(), first.size());
  OwnedBatch zeros = testing::SmallBatch(batch.batch_size, 4242);  // not `batch`'s new ids
  std::fill(zeros.dense.begin(), zeros.dense.end(), 0.0f);
  for (Engine* e : {&engine, &control}) {
    e->WriteParameter(first.name, huge.data(), first.size());
    e->TrainStep(zeros.view());
  }
  try {
    engine.TrainStep(batch.view());
    ADD_FAILURE() << "the step did not diverge";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), StatusCode::kFailedPrecondition) << e.what();
  }
  for (Engine* e : {&engine, &control}) e->WriteParameter(first.name, kept.data(), first.size());
}

// SmallConfigText's two tables DYNAMIC and smaller than their ids: t0 of 12 rows (LRU), t1
// of 8 (LFU, admitted at an id's second occurrence, the others pooling the default row).
// `half`: BF16 rows rounded stochastically, t1 of 3 columns (an odd row of 16-bit words;
// CAT, which takes any widths), Adam's two states a row: every packed layout the device
// copies admitted rows in by.
config::DlrmConfig DynamicConfig(config::DeviceConfig::Kind kind, bool half) {
  config::DlrmConfig config = ParseConfigText(testing::SmallConfigText(
      half ? "sparse_optimizer { learning_rate: 0.05 adam {} }" : kOptimizers[1], 1, 8));
  config::TableConfig* t0 = config.mutable_model()->mutable_tables(0);
  t0->set_num_rows(12);
  t0->set_kind(config::TableConfig::DYNAMIC);
  config::TableConfig* t1 = config.mutable_model()->mutable_tables(1);
  t1->set_num_rows(8);
  t1->set_kind(config::TableConfig::DYNAMIC);
  config::DynamicTableConfig* d1 = t1->mutable_dynamic();
  d1->set_eviction(config::DynamicTableConfig::LFU);
  d1->set_min_count(2);
  d1->set_sketch_width(64);
  d1->set_unadmitted(config::DynamicTableConfig::DEFAULT_ROW);
  if (half) {
    config.mutable_model()->set_interaction(config::ModelConfig::CAT);
    t1->set_dim(3);
    config = WithHalfTables(config, config::TableConfig::BF16, config::TableConfig::STOCHASTIC);
  }
  return WithDevice(config, kind);
}

void ExpectSameCounts(const Engine& a, const Engine& b) {
  for (const char* table : {"t0", "t1"}) {
    const TableStats x = a.GetTableStats(table), y = b.GetTableStats(table);
    EXPECT_EQ(x.counts.admitted, y.counts.admitted) << table;
    EXPECT_EQ(x.counts.evicted, y.counts.evicted) << table;
    EXPECT_EQ(x.size, y.size) << table;
  }
}

// DYNAMIC tables on the device: the Engine resolves ids to rows on the host, and each
// step's admissions are copied in before it (train/backend.h RowsChanged). They train as
// the CPU does, with the same admissions and evictions; a diverged step that admitted and
// evicted is taken back on the device too, so the engine trains on bitwise as one that
// never saw it.
TEST(CudaBackendTest, DynamicTablesTrainAsTheCpuDoesAndTakeADivergedStepBack) {
  SKIP_WITHOUT_GPU();
  for (const bool half : {false, true}) {
    SCOPED_TRACE(half ? "BF16, Adam, an odd dim" : "FP32, row-wise Adagrad");
    Engine cpu(DynamicConfig(config::DeviceConfig::CPU, half));
    Engine gpu(DynamicConfig(config::DeviceConfig::CUDA, half));
    Engine control(DynamicConfig(config::DeviceConfig::CUDA, half));
    TrainAlike(cpu, gpu, 60, half ? 5e-3f : 1e-4f);
    ExpectSameCounts(gpu, cpu);
    EXPECT_GT(gpu.GetTableStats("t0").counts.evicted, 0);
    EXPECT_GT(gpu.GetTableStats("t1").counts.evicted, 0);
    for (uint64_t s = 0; s < 60; ++s)
      control.TrainStep(testing::SmallBatch(64, s, /*weighted=*/s % 2 == 0).view());
    // A step with new ids that admits and evicts, then diverges, with the host copy stale
    // (TakeADivergedStep), is taken back on the device too.
    OwnedBatch diverging = testing::SmallBatch(64, 999);
    for (int64_t& id : diverging.ids) id += int64_t{1} << 40;
    TakeADivergedStep(gpu, control, diverging);
    for (uint64_t s = 60; s < 70; ++s) {
      const OwnedBatch batch = testing::SmallBatch(64, s);
      const float a = gpu.TrainStep(batch.view()), b = control.TrainStep(batch.view());
      EXPECT_EQ(std::memcmp(&a, &b, sizeof a), 0) << "step " << s;
    }
    ExpectBitwise(AllParameters(gpu), AllParameters(control));
    ExpectSameCounts(gpu, control);
  }
}

// The rows of an SSD test: FP32 with row-wise Adagrad; FP16 rounded to nearest and BF16
// rounded stochastically (each cache slot as the table row it holds), with Adam.
struct SsdCase {
  const char* name;
  config::TableConfig::Precision precision;
  config::TableConfig::Rounding rounding;
};
constexpr SsdCase kSsdCases[] = {
    {"FP32, row-wise Adagrad", config::TableConfig::FP32, config::TableConfig::NEAREST},
    {"FP16, Adam", config::TableConfig::FP16, config::TableConfig::NEAREST},
    {"BF16 stochastic, Adam", config::TableConfig::BF16, config::TableConfig::STOCHASTIC}};

// SmallConfigText's tables on the SSD tier with caches of 24 of t0's 40 rows and 12 of t1's
// 25, in segments of a few rows, rows as `c` says.
config::DlrmConfig SsdConfig(config::DeviceConfig::Kind kind, const SsdCase& c,
                             const std::string& dir) {
  const bool half = IsHalf(c.precision);
  config::DlrmConfig config = ParseConfigText(testing::SmallConfigText(
      half ? "sparse_optimizer { learning_rate: 0.05 adam {} }" : kOptimizers[1], 1, 8));
  if (half) config = WithHalfTables(config, c.precision, c.rounding);
  config.set_ssd_dir(dir);
  const int64_t caches[2] = {24, 12};
  for (int t = 0; t < 2; ++t) {
    config::TableConfig* table = config.mutable_model()->mutable_tables(t);
    table->mutable_ssd()->set_cache_bytes(SsdCacheBytes(config, t, caches[t]));
    table->mutable_ssd()->set_segment_bytes(256);
  }
  return WithDevice(config, kind);
}

// A diverged step over an SSD table's cache whose slots it evicts (with 24 slots for t0,
// `early`'s and `late`'s rows are all it holds; the diverging batch's 12 new rows evict
// `early`'s) taken back by `engine`, whose next step trains `early`'s rows in the slots
// they were put back in before anything pushes the state; `control` never sees the
// diverging batch. As TakeADivergedStep: weights of 3e38 with dense values of 0.
void TakeADivergedStepOverTheCache(Engine& engine, Engine& control) {
  const ParameterInfo first = engine.Parameters()[0];  // bottom_mlp.0.weight
  std::vector<float> kept(first.size()), huge(first.size(), 3e38f);
  engine.ReadParameter(first.name, kept.data(), first.size());
  const OwnedBatch early = testing::SmallBatchOfRows(0, 0, 60, /*zero_dense=*/true),
                   late = testing::SmallBatchOfRows(12, 12, 70, true);
  for (Engine* e : {&engine, &control}) {
    e->WriteParameter(first.name, huge.data(), first.size());
    e->TrainStep(early.view());
    e->TrainStep(late.view());
  }
  EXPECT_THROW(engine.TrainStep(testing::SmallBatchOfRows(24, 0, 999).view()), Error);
  const float a = engine.TrainStep(early.view()), b = control.TrainStep(early.view());
  EXPECT_EQ(std::memcmp(&a, &b, sizeof a), 0);
  for (Engine* e : {&engine, &control}) e->WriteParameter(first.name, kept.data(), first.size());
}

// SSD tables with their cache on the device: evicted slots come back from the device
// before their write-back, filled ones go in (with the rows they hold, which key a 16-bit
// slot's stochastic rounding) before the step or prediction. They train as the CPU does
// (as the table held in memory), and a diverged step is taken back bitwise.
TEST(CudaBackendTest, SsdTablesCacheOnTheDeviceTrainAsTheCpuDoes) {
  SKIP_WITHOUT_GPU();
  for (const SsdCase& c : kSsdCases) {
    SCOPED_TRACE(c.name);
    const bool half = IsHalf(c.precision);
    const std::string dir = testing::TempDir("cuda_ssd");
    Engine cpu(SsdConfig(config::DeviceConfig::CPU, c, dir));
    Engine gpu(SsdConfig(config::DeviceConfig::CUDA, c, dir));
    Engine control(SsdConfig(config::DeviceConfig::CUDA, c, dir));
    const float tol = half ? 5e-3f : 1e-4f;
    // Batches of 4 (at most 24 rows of t0 and 12 of t1): the caches evict every few steps.
    for (uint64_t s = 0; s < 60; ++s) {
      const OwnedBatch batch = testing::SmallBatch(4, s, /*weighted=*/s % 3 == 1);
      const float want = cpu.TrainStep(batch.view()), got = gpu.TrainStep(batch.view());
      control.TrainStep(batch.view());
      ASSERT_NEAR(got, want, tol * std::fabs(want)) << "step " << s;
    }
    for (uint64_t salt = 5000; salt < 5008; ++salt) {  // predictions move the caches too
      const OwnedBatch batch = testing::SmallBatch(4, salt);
      testing::ExpectAllNear(Predict(gpu, batch), Predict(cpu, batch), tol, "predictions");
      Predict(control, batch);
    }
    EXPECT_GT(gpu.GetTableStats("t0").counts.evicted, 0);
    TakeADivergedStep(gpu, control, testing::SmallBatch(4, 999));  // fills and evicts slots
    TakeADivergedStepOverTheCache(gpu, control);
    for (uint64_t s = 60; s < 70; ++s) {
      const OwnedBatch batch = testing::SmallBatch(4, s);
      const float a = gpu.TrainStep(batch.view()), b = control.TrainStep(batch.view());
      EXPECT_EQ(std::memcmp(&a, &b, sizeof a), 0) << "step " << s;
    }
    ExpectBitwise(AllParameters(gpu), AllParameters(control));
    // Saved from the device (pulled, the cache flushed to the store), predicting on the CPU.
    const std::string path = dir + "/gpu.ckpt";
    gpu.Save(path);
    Engine restored(SsdConfig(config::DeviceConfig::CPU, c, dir));
    restored.Load(path);
    for (uint64_t salt = 6000; salt < 6004; ++salt) {
      const OwnedBatch batch = testing::SmallBatch(4, salt);
      testing::ExpectAllNear(Predict(restored, batch), Predict(gpu, batch), 1e-5f, "restored");
    }
  }
}

// On the device as on the CPU, a cache computes as the table held whole: every sum of a
// row's gradient in the same order whatever slot holds the row, and each 16-bit slot
// rounding with the bits of the row it holds (a slot keyed by itself would round
// differently, within any tolerance a comparison with the CPU allows). Bitwise, every case.
TEST(CudaBackendTest, SsdCachesOnTheDeviceTrainBitwiseAsTheTableHeldThere) {
  SKIP_WITHOUT_GPU();
  for (const SsdCase& c : kSsdCases) {
    SCOPED_TRACE(c.name);
    const std::string dir = testing::TempDir("cuda_ssd_whole");
    config::DlrmConfig whole = SsdConfig(config::DeviceConfig::CUDA, c, dir);
    for (auto& table : *whole.mutable_model()->mutable_tables()) table.clear_ssd();
    Engine cache(SsdConfig(config::DeviceConfig::CUDA, c, dir)), held(whole);
    for (uint64_t s = 0; s < 60; ++s) {
      const OwnedBatch batch = testing::SmallBatch(4, s, /*weighted=*/s % 3 == 1);
      const float a = cache.TrainStep(batch.view()), b = held.TrainStep(batch.view());
      ASSERT_EQ(std::memcmp(&a, &b, sizeof a), 0) << "step " << s;
      if (s % 10 == 9) {  // predictions move the cache too
        const OwnedBatch other = testing::SmallBatch(4, 5000 + s);
        EXPECT_EQ(Predict(cache, other), Predict(held, other));
      }
    }
    EXPECT_GT(cache.GetTableStats("t0").counts.evicted, 0);
    ExpectBitwise(AllParameters(cache), AllParameters(held));
  }
}

// Tables and their optimizer state beyond the device's free memory are refused before
// anything is copied, naming the bytes, the largest table and the device (no GPU needed:
// the check takes the device's description and its free bytes). Only the tables a feature
// binds count: a table no feature pools (a trainer's row-wise pieces, which its host store
// serves) is never copied to the device.
TEST(CudaBackendTest, TablesBeyondTheDevicesFreeMemoryAreRefusedNamingThem) {
  std::vector<EmbeddingTable<float>> tables;
  tables.emplace_back("small", 10, 4);
  tables.emplace_back("big", 1000, 8);
  tables.emplace_back("served", 100000, 8);
  const auto optimizer = MakeSparseOptimizer<float>(
      ParseConfigText("sparse_optimizer { adagrad { } }").sparse_optimizer(),
      {{10, 4}, {1000, 8}, {100000, 8}});
  const std::vector<FeatureBinding> features = {{0, 0, false}, {1, 4, false}, {1, 12, true}};
  cuda::DeviceInfo device;
  device.name = "a test GPU";
  device.shared_memory_per_block = 227 * 1024;
  const size_t need = (10 * 4 + 1000 * 8) * sizeof(float) * 2;  // rows and sums of squares
  cuda::DeviceTables::Check(tables, features, *optimizer, {}, device, need);  // fits exactly
  testing::ExpectError(
      [&] { cuda::DeviceTables::Check(tables, features, *optimizer, {}, device, need - 1); },
      StatusCode::kResourceExhausted,
      "the embedding tables need 64320 bytes of device memory (rows, "
      "optimizer state and rounding keys; the largest, table \"big\", 64000 bytes) but a test "
      "GPU has 64319 bytes free");
  const std::vector<FeatureBinding> all = {{0, 0, false}, {1, 4, false}, {2, 12, false}};
  testing::ExpectError(
      [&] { cuda::DeviceTables::Check(tables, all, *optimizer, {}, device, need); },
      StatusCode::kResourceExhausted, "the largest, table \"served\"");
}

// An SSD table's 16-bit cache with stochastic rounding keeps the table row each slot holds
// beside its rows on the device (8 bytes a slot), and Check counts them; keys given for a
// table that rounds to nearest cost nothing.
TEST(CudaBackendTest, AStochasticCachesRoundingKeysCountInItsDeviceBytes) {
  std::vector<EmbeddingTable<float>> tables;
  tables.emplace_back("cache", 100, 8, config::TableConfig::BF16, config::TableConfig::STOCHASTIC);
  tables.emplace_back("nearest", 100, 8, config::TableConfig::BF16);
  const auto optimizer = MakeSparseOptimizer<float>(
      ParseConfigText("sparse_optimizer { sgd { } }").sparse_optimizer(), {{100, 8}, {100, 8}});
  const std::vector<FeatureBinding> features = {{0, 0, false}, {1, 8, false}};
  cuda::DeviceInfo device;
  device.name = "a test GPU";
  device.shared_memory_per_block = 227 * 1024;
  const std::vector<int64_t> slots(100, 7);
  const cuda::RowKeys keys = {slots.data(), slots.data()};
  const size_t need = 2 * 100 * 8 * sizeof(uint16_t) + 100 * sizeof(int64_t);
  cuda::DeviceTables::Check(tables, features, *optimizer, keys, device, need);
  testing::ExpectError(
      [&] { cuda::DeviceTables::Check(tables, features, *optimizer, keys, device, need - 1); },
      StatusCode::kResourceExhausted, "need 4000 bytes");
  cuda::DeviceTables::Check(tables, features, *optimizer, {}, device, need - 800);
}

// A table whose row does not fit a block's shared memory (the embedding update holds one
// row's gradient there) is refused when the engine is made, naming the table.
TEST(CudaBackendTest, ATableTooWideForTheDeviceIsRefusedNamingIt) {
  SKIP_WITHOUT_GPU();
  config::DlrmConfig config = ParseConfigText(testing::SmallConfigText("", 1, 8));
  config.mutable_model()->set_interaction(config::ModelConfig::CAT);
  config.mutable_model()->mutable_tables(1)->set_dim(65536);
  config.mutable_model()->mutable_tables(1)->set_num_rows(2);
  try {
    Engine gpu(WithDevice(config, config::DeviceConfig::CUDA));
    ADD_FAILURE() << "a table of dim 65536 was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("table \"t1\" has dim 65536"), std::string::npos)
        << e.what();
  }
}

TEST(CudaBackendTest, TheCrossNetworkRepeatsBitwiseInGraphsAndInBf16) {
  SKIP_WITHOUT_GPU();
  for (const auto precision : {config::DeviceConfig::HIGHEST, config::DeviceConfig::MEDIUM}) {
    SCOPED_TRACE(config::DeviceConfig::MatmulPrecision_Name(precision));
    std::vector<std::vector<float>> first;
    std::vector<float> first_losses;
    for (int run = 0; run < 2; ++run) {
      Engine gpu = MakeDcnEngine(kOptimizers[1], 4, config::DeviceConfig::CUDA, precision);
      std::vector<float> losses;
      // Batches of one shape: the steps after the first replay a CUDA graph.
      for (uint64_t s = 0; s < 30; ++s)
        losses.push_back(gpu.TrainStep(FixedShapeBatch(64, s).view()));
      for (const float loss : losses) ASSERT_TRUE(std::isfinite(loss));
      if (run == 0) {
        first = AllParameters(gpu);
        first_losses = losses;
        continue;
      }
      ExpectBitwise(AllParameters(gpu), first);
      EXPECT_EQ(std::memcmp(losses.data(), first_losses.data(), losses.size() * 4), 0);
    }
  }
}

TEST(CudaBackendTest, StochasticRoundingRepeatsBitwiseOnTheGpu) {
  SKIP_WITHOUT_GPU();
  const config::DlrmConfig config =
      WithDevice(WithHalfTables(ParseConfigText(testing::SmallConfigText(kOptimizers[1], 1, 8)),
                                config::TableConfig::BF16, config::TableConfig::STOCHASTIC),
                 config::DeviceConfig::CUDA);
  std::vector<std::vector<float>> first;
  for (int run = 0; run < 2; ++run) {
    Engine gpu(config);
    for (uint64_t s = 0; s < 40; ++s) gpu.TrainStep(FixedShapeBatch(64, s).view());
    if (run == 0) {
      first = AllParameters(gpu);
      continue;
    }
    ExpectBitwise(AllParameters(gpu), first);
  }
}

}  // namespace
}  // namespace dlrm

// Data-parallel trainers whose dense forward and backward run on a GPU
// (engine/cuda/trainer_backend.h) against the same job on the CPU: two trainers on the one
// GPU and two embedding servers, in-process (tests/support/dist_cluster.h). Losses within
// 1e-4 relative at every step and predictions within 1e-4 after 100 steps, with SGD and with
// Adagrad + row-wise Adagrad, table-wise and replicated (DATA_PARALLEL) tables, a DOT and a
// DCNv2 model; both ranks hold the same dense parameters bitwise; a second GPU job repeats
// the first bitwise. And a job whose one trainer exchanges over NCCL (DLRM_COLLECTIVE=nccl).
// Reported SKIPPED where there is no GPU (data_parallel_trainer_test covers the refusal
// there), except the NCCL job's refusal, checked here.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "engine/config/config.h"
#include "engine/cuda/trainer_backend.h"
#include "engine/device_backends.h"
#include "engine/engine.h"
#include "engine/shard/planner.h"
#include "engine/train/model_parallel_trainer.h"
#include "tests/support/cuda_support.h"
#include "tests/support/dist_cluster.h"
#include "tests/support/dist_config.h"
#include "tests/support/dist_data.h"
#include "tests/support/dist_job.h"

namespace dlrm {
namespace {

using testing::InProcessCluster;
using Type = config::ShardingConfig::Type;
constexpr int32_t kServers = 2, kTrainers = 2;
constexpr int64_t kPart = 32, kGlobal = kPart * kTrainers;

struct Case {
  Type type;
  const char* dense;
  const char* sparse;
  bool dcn;
};

std::string CaseName(const Case& k) {
  return std::string(shard::ShardingTypeShortName(k.type)) + "_" + k.dense + "_" + k.sparse +
         (k.dcn ? "_dcn" : "");
}

void PrintTo(const Case& k, std::ostream* os) { *os << CaseName(k); }

config::DlrmConfig CaseConfig(const Case& k, config::DeviceConfig::Kind device) {
  config::DlrmConfig c = testing::ShardedTestConfig(k.type, k.dense, k.sparse, kServers);
  if (k.dcn) {
    c.mutable_model()->set_interaction(config::ModelConfig::DCN);
    c.mutable_model()->mutable_dcn()->set_num_layers(2);
    c.mutable_model()->mutable_dcn()->set_rank(4);
  }
  c.mutable_device()->set_kind(device);
  ValidateConfig(c);
  return c;
}

std::unique_ptr<InProcessCluster> MakeJob(const config::DlrmConfig& c) {
  return std::make_unique<InProcessCluster>(c, kServers, kTrainers, 0,
                                            BuiltTrainerDevices().backend);
}

// One step of the job on global batch `step`; its rank-0 loss (every rank's is the same).
float Step(InProcessCluster& job, const config::DlrmConfig& c, int64_t step) {
  const OwnedBatch global = testing::MakeTestBatch(c, step, kGlobal);
  std::vector<std::string> errors;
  const std::vector<float> losses =
      job.Step({testing::Part(global, 0, kPart), testing::Part(global, kPart, kGlobal)}, &errors);
  EXPECT_EQ(errors, std::vector<std::string>(kTrainers, ""));
  EXPECT_EQ(losses[0], losses[1]) << "step " << step;
  return losses[0];
}

std::vector<float> Predict(InProcessCluster& job, const config::DlrmConfig& c) {
  const OwnedBatch batch = testing::MakeTestBatch(c, 1000, kGlobal);
  std::vector<float> logits(kGlobal);
  job.trainers[0]->PredictLogits(batch.view(), logits.data());
  return logits;
}

class CudaTrainerTest : public ::testing::TestWithParam<Case> {};

TEST_P(CudaTrainerTest, TrainsAsTheCpuJobDoesAndRepeatsBitwise) {
  SKIP_WITHOUT_GPU();
  const config::DlrmConfig cpu_config = CaseConfig(GetParam(), config::DeviceConfig::CPU);
  const config::DlrmConfig gpu_config = CaseConfig(GetParam(), config::DeviceConfig::CUDA);
  std::unique_ptr<InProcessCluster> cpu = MakeJob(cpu_config);
  std::unique_ptr<InProcessCluster> gpu = MakeJob(gpu_config), again = MakeJob(gpu_config);
  ASSERT_EQ(gpu->trainers[1]->device(), "cuda:0");
  for (int64_t step = 0; step < 100; ++step) {
    const float want = Step(*cpu, cpu_config, step);
    const float got = Step(*gpu, gpu_config, step);
    ASSERT_NEAR(got, want, 1e-4f * std::fabs(want)) << "step " << step;
    ASSERT_EQ(Step(*again, gpu_config, step), got) << "step " << step << ": not repeated";
  }
  EXPECT_EQ(gpu->trainers[0]->model().dense_params(), gpu->trainers[1]->model().dense_params())
      << "the ranks' dense parameters differ";
  EXPECT_EQ(gpu->trainers[0]->model().dense_params(), again->trainers[0]->model().dense_params())
      << "a second GPU job did not repeat the first";
  testing::ExpectAllNear(Predict(*gpu, gpu_config), Predict(*cpu, cpu_config), 1e-4f,
                         "predictions");
}

INSTANTIATE_TEST_SUITE_P(
    Jobs, CudaTrainerTest,
    ::testing::Values(Case{config::ShardingConfig::TABLE_WISE, "sgd", "sgd", false},
                      Case{config::ShardingConfig::TABLE_WISE, "adagrad", "rowwise_adagrad", false},
                      Case{config::ShardingConfig::DATA_PARALLEL, "adagrad", "rowwise_adagrad",
                           false},
                      Case{config::ShardingConfig::TABLE_WISE, "adagrad", "rowwise_adagrad", true}),
    [](const ::testing::TestParamInfo<Case>& info) { return CaseName(info.param); });

// A trainer's ordinal with no device behind it is refused naming it, before any step.
TEST(CudaTrainerDevice, AnOrdinalWithNoDeviceIsRefused) {
  SKIP_WITHOUT_GPU();
  config::DlrmConfig c = CaseConfig(Case{config::ShardingConfig::TABLE_WISE, "sgd", "sgd", false},
                                    config::DeviceConfig::CUDA);
  c.mutable_device()->set_ordinal(cuda::DeviceCount());
  try {
    MakeJob(c);
    FAIL() << "ordinal " << c.device().ordinal() << " was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), StatusCode::kInvalidArgument) << e.what();
  }
}

// DLRM_COLLECTIVE=nccl: a trainer on a GPU exchanges through NCCL (bootstrapped over the
// built-in all-gather). One server and one trainer, over loopback (the one GPU here: NCCL
// takes one rank per device): the job's losses are the CPU engine's within 1e-4 relative.
// Without a GPU the trainer is refused naming why (this half runs in CI).
TEST(CudaTrainerNccl, OneTrainerOverNcclTrainsAsTheCpuOrIsRefusedNamingWhy) {
  config::DlrmConfig c = testing::ShardedTestConfig(config::ShardingConfig::TABLE_WISE, "adagrad",
                                                    "rowwise_adagrad", 1);
  c.mutable_device()->set_kind(config::DeviceConfig::CUDA);
  std::vector<float> losses;
  const testing::JobResult result = testing::RunJob(
      c, "",
      [&](train::TrainerRole& t) {
        for (int64_t step = 0; step < 10; ++step)
          losses.push_back(t.trainer().TrainStep(testing::MakeTestBatch(c, step, kGlobal).view()));
      },
      20000, false, cluster::ClusterEnv::Collective::kNccl, 1, 1, nullptr, BuiltTrainerDevices());
  if (cuda::DeviceCount() == 0) {
    EXPECT_THAT(result.trainer_errors[0],
                ::testing::ContainsRegex("built without CUDA|no usable CUDA device|libnccl"));
    return;
  }
  ASSERT_EQ(result.trainer_errors[0], "");
  config::DlrmConfig on_cpu = c;
  on_cpu.mutable_device()->set_kind(config::DeviceConfig::CPU);
  Engine engine(on_cpu);
  ASSERT_EQ(losses.size(), 10u);
  for (int64_t step = 0; step < 10; ++step) {
    const float want = engine.TrainStep(testing::MakeTestBatch(c, step, kGlobal).view());
    EXPECT_NEAR(losses[step], want, 1e-4f * std::fabs(want)) << "step " << step;
  }
}

// Trainers that own the embedding shards (a job without servers, model_parallel_trainer.h)
// with their dense step on the GPU: two trainers on one GPU over the built-in transport,
// and one over NCCL (its all-to-all through the communicator's default); the losses are
// the CPU engine's within 1e-4 relative and the two ranks hold the same parameters.
TEST(CudaTrainerNeo, TrainersOwningTheShardsTrainTheDenseStepOnTheGpu) {
  SKIP_WITHOUT_GPU();
  config::DlrmConfig c =
      testing::ShardedTestConfig(config::ShardingConfig::COLUMN_WISE, "adagrad", "adagrad", 2);
  c.mutable_device()->set_kind(config::DeviceConfig::CUDA);
  config::DlrmConfig on_cpu = c;
  on_cpu.mutable_device()->set_kind(config::DeviceConfig::CPU);
  constexpr int64_t kSteps = 20;
  std::vector<float> want;
  Engine engine(on_cpu);
  for (int64_t step = 0; step < kSteps; ++step)
    want.push_back(engine.TrainStep(testing::MakeTestBatch(c, step, kGlobal).view()));
  for (const int32_t trainers : {2, 1}) {
    const auto collective = trainers == 1 ? cluster::ClusterEnv::Collective::kNccl
                                          : cluster::ClusterEnv::Collective::kBuiltin;
    std::vector<std::vector<float>> losses(trainers), params(trainers);
    std::vector<std::string> devices(trainers);
    const testing::JobResult result = testing::RunJob(
        c, "",
        [&](train::TrainerRole& t) {
          const int32_t r = t.trainer_rank();
          const int64_t part = kGlobal / trainers;
          devices[r] = t.trainer().device();
          for (int64_t step = 0; step < kSteps; ++step)
            losses[r].push_back(t.trainer().TrainStep(
                testing::Part(testing::MakeTestBatch(c, step, kGlobal), r * part, (r + 1) * part)
                    .view()));
          params[r] = t.trainer().model().dense_params();
        },
        20000, false, collective, /*servers=*/0, trainers, nullptr, BuiltTrainerDevices());
    for (int32_t r = 0; r < trainers; ++r) {
      ASSERT_EQ(result.trainer_errors[r], "") << trainers << " trainers, rank " << r;
      EXPECT_EQ(devices[r], "cuda:0");
      ASSERT_EQ(losses[r].size(), want.size());
      for (int64_t step = 0; step < kSteps; ++step)
        EXPECT_NEAR(losses[r][step], want[step], 1e-4f * std::fabs(want[step]))
            << trainers << " trainers, rank " << r << ", step " << step;
      EXPECT_EQ(params[r], params[0]) << "rank " << r << "'s dense parameters differ";
    }
  }
}

// What one trainer of a Neo job ends with: its losses, dense parameters, and the rows of
// the shards it owns (FP32 values, or 16-bit words).
struct NeoRun {
  std::vector<float> losses, params;
  std::vector<std::vector<float>> rows;
  std::vector<std::vector<uint16_t>> halves;
  std::string owned_device;
};

std::vector<NeoRun> RunNeo(const config::DlrmConfig& c, const train::TrainerDevices& devices) {
  constexpr int32_t kTrainers = 2;
  std::vector<NeoRun> runs(kTrainers);
  const testing::JobResult result = testing::RunJob(
      c, "",
      [&](train::TrainerRole& t) {
        const int32_t r = t.trainer_rank();
        const int64_t part = kGlobal / kTrainers;
        for (int64_t step = 0; step < 12; ++step)
          runs[r].losses.push_back(t.trainer().TrainStep(
              testing::Part(testing::MakeTestBatch(c, step, kGlobal), r * part, (r + 1) * part)
                  .view()));
        runs[r].params = t.trainer().model().dense_params();
        const auto& owner = dynamic_cast<const train::ModelParallelTrainer&>(t.trainer());
        runs[r].owned_device = owner.owned_device();
        for (const EmbeddingTable<float>& table : owner.owned().shard_tables()) {
          runs[r].rows.push_back(table.data());
          runs[r].halves.push_back(table.halves());
        }
      },
      20000, false, cluster::ClusterEnv::Collective::kBuiltin, /*servers=*/0, kTrainers, nullptr,
      devices);
  for (int32_t r = 0; r < kTrainers; ++r) EXPECT_EQ(result.trainer_errors[r], "") << "rank " << r;
  return runs;
}

// A job of 2 trainers owning their shards on the GPU: `type` for the first test table (for
// ROW_WISE, its pieces beside the second table's column blocks and the third, replicated).
config::DlrmConfig NeoOnTheGpu(config::ShardingConfig::Type type,
                               config::TableConfig::Precision precision) {
  config::DlrmConfig c = testing::WithTablePrecision(
      testing::ShardedTestConfig(type, "adagrad", "adagrad", 2), precision);
  if (type == config::ShardingConfig::ROW_WISE) {
    auto* tables = c.mutable_sharding()->mutable_tables();
    tables->Mutable(1)->set_allowed_types(0, config::ShardingConfig::COLUMN_WISE);
    tables->Mutable(2)->set_allowed_types(0, config::ShardingConfig::DATA_PARALLEL);
  }
  c.mutable_device()->set_kind(config::DeviceConfig::CUDA);
  ValidateConfig(c);
  return c;
}

// The shards a trainer owns, held and trained in the GPU's memory (cuda/owned_shards.h),
// pool and update as the host store does, bit for bit: the same job with its shards
// trained on the host (the dense step on the GPU both times) ends with the same losses,
// dense parameters and rows; column-wise shards of BF16 rows rounded stochastically too
// (their bits are the whole table's columns'); and row-wise pieces beside column blocks
// and a replicated table, the pieces staying in host memory (the store serves and trains
// them) while the column blocks train on the GPU.
TEST(CudaTrainerNeo, ShardsOnTheGpuTrainAsTheHostStoreBitwise) {
  SKIP_WITHOUT_GPU();
  for (const auto& [type, precision] :
       {std::pair{config::ShardingConfig::COLUMN_WISE, config::TableConfig::FP32},
        std::pair{config::ShardingConfig::COLUMN_WISE, config::TableConfig::BF16},
        std::pair{config::ShardingConfig::ROW_WISE, config::TableConfig::FP32}}) {
    const config::DlrmConfig c = NeoOnTheGpu(type, precision);
    SCOPED_TRACE(config::ShardingConfig::Type_Name(type) + " " +
                 config::TableConfig::Precision_Name(precision));
    const shard::ShardingPlan plan = shard::PlanSharding(c, 2, shard::ShardOwners::kTrainers);
    int pieces = 0;
    for (const shard::TableShard& s : plan.shards())
      pieces += s.type() == config::ShardingConfig::ROW_WISE;
    EXPECT_EQ(pieces > 0, type == config::ShardingConfig::ROW_WISE);
    train::TrainerDevices host = BuiltTrainerDevices();
    host.owned = [](const config::DlrmConfig&, ps::EmbeddingShardStore* store, ThreadPool*) {
      return train::MakeHostOwnedShards(store);
    };
    const std::vector<NeoRun> gpu = RunNeo(c, BuiltTrainerDevices()), cpu = RunNeo(c, host);
    for (size_t r = 0; r < gpu.size(); ++r) {
      EXPECT_EQ(gpu[r].owned_device, "cuda:0");
      EXPECT_EQ(cpu[r].owned_device, "cpu");
      EXPECT_EQ(gpu[r].losses, cpu[r].losses) << "rank " << r;
      EXPECT_EQ(gpu[r].params, cpu[r].params) << "rank " << r;
      EXPECT_EQ(gpu[r].rows, cpu[r].rows) << "rank " << r;
      EXPECT_EQ(gpu[r].halves, cpu[r].halves) << "rank " << r;
      EXPECT_FALSE(gpu[r].rows.empty() && gpu[r].halves.empty()) << "rank " << r << " owns nothing";
    }
  }
}

}  // namespace
}  // namespace dlrm

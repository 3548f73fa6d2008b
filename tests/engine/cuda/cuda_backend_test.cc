// The Engine on a CUDA device (engine/cuda/backend.h) against the same Engine on the CPU:
// predictions from the same initial weights, after a checkpoint trained on the CPU is
// loaded, and after a parameter is written (PushState). Within 1e-5: the GEMMs' order is
// cuBLASLt's. Reported SKIPPED where there is no GPU (engine_test covers that case).
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "engine/config/config.h"
#include "engine/core/status.h"
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

void ExpectClose(const std::vector<float>& got, const std::vector<float>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5) << i;
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
    ExpectClose(Predict(gpu, batch), Predict(cpu, batch));
    for (uint64_t s = 0; s < 20; ++s) cpu.TrainStep(testing::SmallBatch(32, s).view());
    const std::string path = testing::TempDir("cuda_backend") + "/cpu.ckpt";
    cpu.Save(path);
    gpu.Load(path);  // PushState: the device takes the trained weights over
    ExpectClose(Predict(gpu, batch), Predict(cpu, batch));
    const ParameterInfo top = cpu.Parameters()[cpu.Parameters().size() - 2];
    std::vector<float> values(top.size(), 0.01f);
    cpu.WriteParameter(top.name, values.data(), top.size());
    gpu.WriteParameter(top.name, values.data(), top.size());
    ExpectClose(Predict(gpu, batch), Predict(cpu, batch));
    EXPECT_EQ(gpu.step(), 20);
  }
}

}  // namespace
}  // namespace dlrm

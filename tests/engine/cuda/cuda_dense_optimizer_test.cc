// The dense optimizers on a CUDA device (engine/cuda/dense_optimizer.h) against the CPU's
// (engine/optim/dense_optimizer.h), bitwise, parameters and state, over several steps of
// every kind and option; and the argument checks, which run everywhere.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "engine/config/config.h"
#include "engine/core/philox.h"
#include "engine/core/status.h"
#include "engine/cuda/dense_optimizer.h"
#include "engine/optim/dense_optimizer.h"
#include "tests/support/cuda_support.h"

namespace dlrm::cuda {
namespace {

using testing::DeviceCopy;
using ::testing::HasSubstr;

config::DenseOptimizerConfig Parse(const std::string& text) {
  return ParseConfigText("dense_optimizer { learning_rate: 0.05 " + text + " }").dense_optimizer();
}

void ExpectBitwise(const std::vector<float>& a, const std::vector<float>& b,
                   const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << what;
}

void CompareWithCpu(const std::string& text) {
  SCOPED_TRACE(text);
  const config::DenseOptimizerConfig config = Parse(text);
  const size_t n = 1000;  // not a multiple of the block size
  std::vector<float> params = testing::RandomFloats(n, 7, 1.0);
  auto cpu = MakeDenseOptimizer<float>(config, n);
  DeviceCopy<float> d_params(params);
  std::vector<std::unique_ptr<DeviceCopy<float>>> d_state;
  std::vector<float*> state;
  for (const auto& [name, buffer] : cpu->StateBuffers()) {
    d_state.push_back(std::make_unique<DeviceCopy<float>>(*buffer));  // the CPU's initial values
    state.push_back(d_state.back()->get());
  }
  for (int64_t step = 1; step <= 5; ++step) {
    const std::vector<float> grads = testing::RandomFloats(n, 100 + step, 0.5);
    const float lr = 0.05f / static_cast<float>(step);
    cpu->Update(params.data(), grads.data(), 0, n, lr, step);
    const DeviceCopy<float> d_grads(grads);
    const DeviceCopy<DenseStepArgs> args({MakeDenseStepArgs(config, lr, step)});
    LaunchDenseUpdate(config, d_params.get(), d_grads.get(), state, static_cast<int64_t>(n),
                      args.get(), nullptr, nullptr);
  }
  ExpectBitwise(d_params.ToHost(), params, "params");
  const auto buffers = cpu->StateBuffers();
  for (size_t s = 0; s < buffers.size(); ++s)
    ExpectBitwise(d_state[s]->ToHost(), *buffers[s].second, buffers[s].first);
}

TEST(CudaDenseOptimizerTest, EqualsTheCpuBitwiseForEveryKind) {
  SKIP_WITHOUT_GPU();
  OpenDevice(0);
  CompareWithCpu("sgd {}");
  CompareWithCpu("sgd { momentum: 0.9 weight_decay: 0.01 }");
  CompareWithCpu("sgd { momentum: 0.9 nesterov: true }");
  CompareWithCpu("adagrad { eps: 1e-8 initial_accumulator: 0.1 weight_decay: 0.001 }");
  CompareWithCpu("adam { beta1: 0.9 beta2: 0.999 eps: 1e-8 weight_decay: 0.01 }");
  CompareWithCpu(
      "adam { beta1: 0.8 beta2: 0.99 eps: 1e-6 weight_decay: 0.1 decoupled_weight_decay: true }");
}

// A nonzero skip flag (a diverged step) leaves parameters and state as they were.
TEST(CudaDenseOptimizerTest, SkipFlagChangesNothing) {
  SKIP_WITHOUT_GPU();
  OpenDevice(0);
  const config::DenseOptimizerConfig config = Parse("adam { beta1: 0.9 beta2: 0.999 eps: 1e-8 }");
  const size_t n = 300;
  const std::vector<float> params = testing::RandomFloats(n, 3, 1.0);
  DeviceCopy<float> d_params(params), m(std::vector<float>(n, 0.5f)), v(std::vector<float>(n, 2));
  const DeviceCopy<float> grads(testing::RandomFloats(n, 4, 1.0));
  const DeviceCopy<DenseStepArgs> args({MakeDenseStepArgs(config, 0.1f, 3)});
  const DeviceCopy<int32_t> skip({1});
  LaunchDenseUpdate(config, d_params.get(), grads.get(), {m.get(), v.get()},
                    static_cast<int64_t>(n), args.get(), skip.get(), nullptr);
  ExpectBitwise(d_params.ToHost(), params, "params");
  ExpectBitwise(m.ToHost(), std::vector<float>(n, 0.5f), "exp_avg");
  ExpectBitwise(v.ToHost(), std::vector<float>(n, 2), "exp_avg_sq");
}

// Refused before anything reaches the device: these need no GPU.
TEST(CudaDenseOptimizerTest, BadArgumentsAreRefusedNamingThem) {
  const auto expect_invalid = [](const std::string& text, std::vector<float*> state, int64_t step,
                                 const std::string& needle) {
    try {
      const config::DenseOptimizerConfig config = Parse(text);
      const DenseStepArgs args = MakeDenseStepArgs(config, 0.1f, step);
      LaunchDenseUpdate(config, nullptr, nullptr, state, 10, &args, nullptr, nullptr);
      ADD_FAILURE() << "accepted: " << needle;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), StatusCode::kInvalidArgument);
      EXPECT_THAT(e.what(), HasSubstr(needle));
    }
  };
  expect_invalid("sgd {}", {}, 0, "dense optimizer: step must be >= 1, got 0");
  expect_invalid("adam {}", {nullptr}, 1, "1 state buffers given, the optimizer keeps 2");
  expect_invalid("sgd { momentum: 0.5 }", {}, 1, "0 state buffers given, the optimizer keeps 1");
  EXPECT_EQ(DenseOptimizerStateCount(Parse("adagrad {}")), 1);
  EXPECT_EQ(DenseOptimizerStateCount(Parse("sgd {}")), 0);
}

}  // namespace
}  // namespace dlrm::cuda

// train/memory_budget.h: the dense parameters counted with the tables, and a trainer's own
// part of a job checked before it allocates.
#include "engine/train/memory_budget.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "engine/config/config.h"
#include "engine/core/status.h"
#include "engine/engine.h"
#include "engine/model/dlrm_model.h"
#include "tests/support/test_support.h"

namespace dlrm::train {
namespace {

// A review's finding (2026-11-28): the budget counted tables only, so a full-rank cross
// network over 26 features of dim 1024 (26,640 columns: 5.7G parameters, 22.7 GB) passed
// it and died of bad_alloc, or of the OOM killer, while zeroing its parameters.
TEST(MemoryBudgetTest, AHugeCrossNetworkIsRefusedBeforeAllocating) {
  std::string text =
      "model {\n  num_dense_features: 4\n  tables { name: \"t\" num_rows: 10 dim: 1024 }\n";
  for (int f = 0; f < 26; ++f)
    text += "  sparse_features { name: \"f" + std::to_string(f) + "\" table: \"t\" }\n";
  text +=
      "  bottom_mlp { layer_sizes: 1024 }\n  top_mlp { layer_sizes: 1 }\n"
      "  interaction: DCN\n  dcn { num_layers: 8 rank: 0 }\n}\n"
      "dense_optimizer { adagrad {} }\nmemory_limit_bytes: 1073741824\n";
  const config::DlrmConfig config = ParseConfigText(text);
  const int64_t width = 1024 + 26 * 1024;
  const int64_t cross = 8 * (width * width + width);
  EXPECT_GT(static_cast<int64_t>(DenseParamCount(config)), cross);
  EXPECT_EQ(DenseBytes(config), static_cast<int64_t>(DenseParamCount(config)) * 3 * 4);
  const auto start = std::chrono::steady_clock::now();
  testing::ExpectError([&] { Engine engine(config); }, StatusCode::kResourceExhausted,
                       "and the dense parameters " + std::to_string(DenseBytes(config)) +
                           " (with their gradient and optimizer state), but memory_limit_bytes "
                           "is 1073741824 bytes");
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

// The count is the model's own: DlrmModel allocates exactly DenseParamCount parameters,
// DOT with its self-interaction term and a low-rank cross network included.
TEST(MemoryBudgetTest, DenseParamCountIsWhatTheModelHolds) {
  for (const std::string extra : {"", "  dot_self_interaction: true\n", "  interaction: CAT\n",
                                  "  interaction: DCN\n  dcn { num_layers: 2 rank: 3 }\n",
                                  "  interaction: DCN\n  dcn { num_layers: 1 rank: 0 }\n"}) {
    std::string text = testing::SmallConfigText();
    text.insert(text.find("model {\n") + 8, extra);
    const config::DlrmConfig config = ParseConfigText(text);
    EXPECT_EQ(DenseParamCount(config), DlrmModel<float>(config).dense_params().size()) << extra;
  }
}

// A trainer counts its own shards (Neo), the DATA_PARALLEL tables and the dense model.
TEST(MemoryBudgetTest, ATrainerIsCheckedForItsOwnPartOfTheJob) {
  config::DlrmConfig config = ParseConfigText(testing::SmallConfigText());
  const int64_t dense = DenseBytes(config);
  shard::ShardingPlan plan;
  plan.add_servers()->set_memory_bytes(5000);
  plan.add_servers()->set_memory_bytes(9000);
  plan.set_trainer_memory_bytes(700);
  config.set_memory_limit_bytes(9000 + 700 + dense);
  CheckTrainerFitsMemory(config, plan, 1, /*owns_shards=*/true);
  config.set_memory_limit_bytes(9000 + 700 + dense - 1);
  testing::ExpectError([&] { CheckTrainerFitsMemory(config, plan, 1, true); },
                       StatusCode::kResourceExhausted,
                       "trainer 1 needs " + std::to_string(9700 + dense) +
                           " bytes: its embedding shards 9000, the tables every trainer holds "
                           "(DATA_PARALLEL) 700 and the dense parameters " +
                           std::to_string(dense));
  CheckTrainerFitsMemory(config, plan, 0, true);   // 5000 of shards fit
  CheckTrainerFitsMemory(config, plan, 1, false);  // shards on servers: not its own
}

}  // namespace
}  // namespace dlrm::train

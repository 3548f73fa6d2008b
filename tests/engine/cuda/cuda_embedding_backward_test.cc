// The embedding backward fused with the sparse optimizers on a CUDA device
// (engine/cuda/embedding_backward.h) against the CPU's (EmbeddingBagCollection::
// BackwardAndUpdate), bitwise, tables and optimizer state, over several steps of every
// optimizer: two tables shared by three features (SUM and MEAN), repeated ids within and
// across bags, empty bags, per-id weights, dims with and without a multiple of 4 and 8, one
// wider than a warp, one wider than a block's default shared memory (64 KiB), and long bags
// whose rows each gather hundreds of occurrences (many chunks of a warp, one partial), their
// d_pooled rows loaded as floats and, where every dim is a multiple of 4, as float4.
// The argument checks run everywhere.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "engine/config/config.h"
#include "engine/core/philox.h"
#include "engine/core/status.h"
#include "engine/cuda/embedding_backward.h"
#include "engine/data/batch.h"
#include "engine/embedding/embedding_bag.h"
#include "engine/embedding/embedding_table.h"
#include "engine/embedding/half_bits.h"
#include "engine/embedding/sparse_optimizer.h"
#include "tests/support/cuda_support.h"
#include "tests/support/test_support.h"

namespace dlrm::cuda {
namespace {

using testing::DeviceCopy;
using ::testing::HasSubstr;

constexpr int64_t kBatch = 50;
constexpr uint64_t kSeed = 77;  // of the keyed tables' stochastic rounding

// Two tables and three features (table 0 twice): dims[0] = 36 is more columns than a warp
// has lanes, a multiple of 4 and 8, and 5 is neither; 16384 floats (64 KiB) need more
// shared memory than a block gets without opting in.
struct Layout {
  int32_t dims[2];
  int32_t max_len = 5;        // bags of 0 .. max_len - 1 ids; 200: rows of hundreds of occurrences
  int64_t rows[2] = {30, 7};  // few rows: many repeats (table 0 the larger)
  bool keyed = false;         // BF16 rows rounded stochastically by keys (MakeTables)
  std::vector<FeatureBinding> Features() const {
    return {{0, 0, false}, {1, dims[0], true}, {0, dims[0] + dims[1], false}};
  }
  int32_t Width() const { return 2 * dims[0] + dims[1]; }
};

OwnedBatch MakeBatch(const Layout& layout, uint64_t salt) {
  const CounterRng rng(salt, 5, 0);
  uint64_t draw = 0;
  OwnedBatch b;
  b.batch_size = kBatch;
  b.num_sparse = 3;
  const std::vector<FeatureBinding> features = layout.Features();
  for (int f = 0; f < 3; ++f) {
    for (int64_t i = 0; i < kBatch; ++i) {
      const auto len = static_cast<int32_t>(rng.Uniform(draw++) * layout.max_len);
      b.lengths.push_back(len);
      for (int32_t k = 0; k < len; ++k) {
        b.ids.push_back(static_cast<int64_t>(rng.Uniform(draw++) * layout.rows[features[f].table]));
        b.weights.push_back(static_cast<float>(0.5 + rng.Uniform(draw++)));
      }
    }
  }
  return b;
}

std::vector<SparseFeatureSpec> Specs(const Layout& layout) {
  std::vector<SparseFeatureSpec> specs;
  for (const FeatureBinding& f : layout.Features())
    specs.push_back({f.table, layout.rows[f.table]});
  return specs;
}

// The CPU's tables of `layout`, from fixed random values: FP32, or (layout.keyed) BF16
// rounded stochastically, each row drawing the bits of another row of a larger table
// (keys[t], as an SSD cache's slots do: EmbeddingTable::KeyRoundingBy).
std::vector<EmbeddingTable<float>> MakeTables(const Layout& layout,
                                              std::vector<std::vector<int64_t>>* keys) {
  std::vector<EmbeddingTable<float>> tables;
  keys->assign(2, {});
  tables.reserve(2);
  for (int t = 0; t < 2; ++t) {
    const int64_t rows = layout.rows[t];
    const int32_t dim = layout.dims[t];
    const std::vector<float> values = testing::RandomFloats(rows * dim, 10 + t);
    if (!layout.keyed) {
      tables.emplace_back("t" + std::to_string(t), rows, dim);
      tables.back().data() = values;
      continue;
    }
    tables.emplace_back("t" + std::to_string(t), rows, dim, config::TableConfig::BF16,
                        config::TableConfig::STOCHASTIC);
    tables.back().SetRoundingKey(kSeed, t);
    for (int64_t r = 0; r < rows; ++r) {
      (*keys)[t].push_back(1000 + 3 * (rows - 1 - r));
      tables.back().WriteRow(r, values.data() + r * dim);
    }
    tables.back().KeyRoundingBy((*keys)[t].data());
  }
  return tables;
}

// The device's copies of the tables, their keys and the optimizer's state, and their
// descriptions for the kernels.
struct DeviceSide {
  std::vector<std::unique_ptr<DeviceCopy<float>>> weights;  // FP32 rows, per table
  std::vector<std::unique_ptr<DeviceCopy<uint16_t>>> halves;
  std::vector<std::vector<std::unique_ptr<DeviceCopy<float>>>> states;
  std::vector<std::unique_ptr<DeviceCopy<int64_t>>> keys;
  std::vector<SparseTableArgs> args;
};

DeviceSide CopyToDevice(const std::vector<EmbeddingTable<float>>& tables,
                        SparseOptimizer<float>& optimizer,
                        const std::vector<std::vector<int64_t>>& keys) {
  DeviceSide d;
  for (int t = 0; t < 2; ++t) {
    const EmbeddingTable<float>& table = tables[static_cast<size_t>(t)];
    SparseTableArgs a;
    a.num_rows = table.num_rows();
    a.dim = table.dim();
    d.weights.push_back(std::make_unique<DeviceCopy<float>>(table.data()));
    d.halves.push_back(std::make_unique<DeviceCopy<uint16_t>>(table.halves()));
    d.keys.push_back(std::make_unique<DeviceCopy<int64_t>>(keys[static_cast<size_t>(t)]));
    a.weights = d.weights.back()->get();
    if (table.half()) {
      a.halves = d.halves.back()->get();
      a.half = 1;  // BF16
      a.stochastic = 1;
      a.rounding_key = half_bits::RoundingKey(kSeed, t);
      a.row_keys = d.keys.back()->get();
    }
    d.states.emplace_back();
    float** slots[2] = {&a.state0, &a.state1};
    const auto states = optimizer.StateBuffers(t);
    for (size_t s = 0; s < states.size(); ++s) {
      d.states.back().push_back(std::make_unique<DeviceCopy<float>>(*states[s].second));
      *slots[s] = d.states.back().back()->get();
    }
    d.args.push_back(a);
  }
  return d;
}

// The device's tables and state bitwise the CPU's.
void ExpectSameAsTheCpu(const DeviceSide& d, const std::vector<EmbeddingTable<float>>& tables,
                        SparseOptimizer<float>& optimizer) {
  for (int t = 0; t < 2; ++t) {
    const EmbeddingTable<float>& table = tables[static_cast<size_t>(t)];
    const std::vector<float> w = d.weights[t]->ToHost();
    const std::vector<uint16_t> h = d.halves[t]->ToHost();
    EXPECT_EQ(std::memcmp(w.data(), table.data().data(), w.size() * 4), 0) << "table " << t;
    EXPECT_EQ(std::memcmp(h.data(), table.halves().data(), h.size() * 2), 0) << "table " << t;
    const auto states = optimizer.StateBuffers(t);
    for (size_t s = 0; s < states.size(); ++s) {
      const std::vector<float> v = d.states[t][s]->ToHost();
      EXPECT_EQ(std::memcmp(v.data(), states[s].second->data(), v.size() * 4), 0)
          << states[s].first << " " << t;
    }
  }
}

// A step's batch on the device, and the backward's arguments naming it and the tables.
struct DeviceStep {
  DeviceStep(const Layout& layout, const OwnedBatch& batch, const ValidatedBatch& vb,
             const std::vector<float>& d_pooled, const SparseFeatureArgs* features,
             const SparseTableArgs* tables)
      : offsets(vb.offsets),
        ids(testing::DeviceIds(batch.ids)),
        weights(batch.weights),
        grad(d_pooled) {
    args.features = features;
    args.num_features = 3;
    args.tables = tables;
    args.num_tables = 2;
    args.max_dim = layout.dims[0];
    args.batch_size = kBatch;
    args.offsets = offsets.get();
    args.ids = ids.get();
    args.id_bits = EmbeddingBackward::IdBitsFor(layout.rows[0]);  // 30 rows: 5, keys of 6 bits
    args.weights = weights.get();
    args.num_ids = static_cast<int64_t>(batch.ids.size());
    args.d_pooled = grad.get();
    args.pooled_width = layout.Width();
  }
  const DeviceCopy<int64_t> offsets;
  const DeviceCopy<DeviceId> ids;
  const DeviceCopy<float> weights, grad;
  EmbeddingBackwardArgs args;
};

// `reuse`: the backward object to run (one of the test's, else a fresh one of row_warps).
void Compare(const Layout& layout, const std::string& optimizer_text,
             EmbeddingBackward* reuse = nullptr,
             int row_warps = EmbeddingBackward::kDefaultRowWarps) {
  SCOPED_TRACE(optimizer_text + " dim " + std::to_string(layout.dims[0]) + " bags < " +
               std::to_string(layout.max_len) + " row_warps " + std::to_string(row_warps) +
               (layout.keyed ? " BF16 keyed" : ""));
  const int32_t* dims = layout.dims;
  const int64_t* rows = layout.rows;
  const std::vector<FeatureBinding> features = layout.Features();
  const int32_t width = layout.Width();
  const config::SparseOptimizerConfig config =
      ParseConfigText("sparse_optimizer { " + optimizer_text + " }").sparse_optimizer();
  std::vector<std::vector<int64_t>> keys;
  std::vector<EmbeddingTable<float>> tables = MakeTables(layout, &keys);
  auto cpu_opt = MakeSparseOptimizer<float>(config, {{rows[0], dims[0]}, {rows[1], dims[1]}});
  const DeviceSide device = CopyToDevice(tables, *cpu_opt, keys);  // the initial values
  EmbeddingBagCollection<float> bags(&tables, features, width);
  std::vector<SparseFeatureArgs> feature_args;
  for (const FeatureBinding& f : features) feature_args.push_back({f.table, f.offset, f.mean});
  const DeviceCopy<SparseFeatureArgs> d_features(feature_args);
  const DeviceCopy<SparseTableArgs> d_tables(device.args);
  EmbeddingBackward own(row_warps);
  EmbeddingBackward& gpu = reuse != nullptr ? *reuse : own;
  for (int64_t step = 1; step <= 4; ++step) {
    const OwnedBatch batch = MakeBatch(layout, step);
    const ValidatedBatch vb = ValidateBatch(batch.view(), 0, Specs(layout), false);
    const std::vector<float> d_pooled = testing::RandomFloats(kBatch * width, 100 + step);
    const float lr = 0.1f / static_cast<float>(step);
    bags.BackwardAndUpdate(vb, d_pooled.data(), *cpu_opt, lr, step, nullptr);
    DeviceStep on_device(layout, batch, vb, d_pooled, d_features.get(), d_tables.get());
    EmbeddingBackwardArgs& a = on_device.args;
    const DeviceCopy<SparseStepArgs> step_args({MakeSparseStepArgs(config, lr, step)});
    gpu.Run(a, step_args.get(), nullptr);
    // The same step again with the skip flag set (a diverged step) changes nothing.
    const DeviceCopy<int32_t> skip({1});
    a.skip = skip.get();
    gpu.Run(a, step_args.get(), nullptr);
  }
  ExpectSameAsTheCpu(device, tables, *cpu_opt);
}

// The process's shared-memory limit is never set below the default 48 KiB: 8192 columns
// (one warp's scratch is 33 KiB, the hot rows' kernel's 66 KiB) must not lower it, since
// 3000 columns then launch 4 warps' scratch (48 KiB) without opting in. First in the file:
// gtest runs a file's tests in order, and a test opting in above 48 KiB before this one
// would hide a lowered limit.
TEST(CudaEmbeddingBackwardTest, AnOptInNeverLowersTheDefaultSharedMemory) {
  SKIP_WITHOUT_GPU();
  OpenDevice(0);
  Compare(Layout{{8192, 5}, 40}, "");
  Compare(Layout{{3000, 5}, 40}, "");
}

TEST(CudaEmbeddingBackwardTest, EqualsTheCpuBitwiseForEveryOptimizer) {
  SKIP_WITHOUT_GPU();
  OpenDevice(0);
  // The last two: hot rows (hundreds of occurrences) staged as floats (dim 5), and as
  // float4 (every dim and offset a multiple of 4).
  for (const Layout& layout :
       {Layout{{36, 5}}, Layout{{16384, 5}}, Layout{{36, 5}, 200}, Layout{{36, 8}, 200}}) {
    Compare(layout, "");
    Compare(layout, "adagrad { eps: 1e-8 initial_accumulator: 0.1 }");
    Compare(layout, "rowwise_adagrad { eps: 1e-8 initial_accumulator: 0.01 }");
    Compare(layout, "adam { beta1: 0.9 beta2: 0.999 eps: 1e-8 }");
  }
}

// BF16 rows rounded stochastically, each drawing the bits of the table row a key names
// (an SSD cache's slots: SparseTableArgs::row_keys), as the CPU's KeyRoundingBy: few and
// hot rows, every optimizer.
TEST(CudaEmbeddingBackwardTest, KeyedRowsRoundAsTheCpuBitwise) {
  SKIP_WITHOUT_GPU();
  OpenDevice(0);
  for (const Layout& layout :
       {Layout{{36, 5}, 5, {30, 7}, true}, Layout{{36, 8}, 200, {30, 7}, true}}) {
    Compare(layout, "");
    Compare(layout, "rowwise_adagrad { eps: 1e-8 initial_accumulator: 0.01 }");
    Compare(layout, "adam { beta1: 0.9 beta2: 0.999 eps: 1e-8 }");
  }
}

// The warps of a block of the few-occurrence rows' kernel change its speed only: one warp
// a block, an odd count and the most. Dims of 3000 and 5000 leave room in 48 KiB for 4 and
// 2 warps' scratch only; 2^17 rows and bags of up to 399 ids give ~18K touched rows, more
// than the kernel has warps (16384), so each warp takes several rows; hot rows (table 1)
// beside cold ones in every layout.
TEST(CudaEmbeddingBackwardTest, EveryRowWarpsCountGivesTheCpusBits) {
  SKIP_WITHOUT_GPU();
  OpenDevice(0);
  for (const int warps : {1, 3, EmbeddingBackward::kMaxRowWarpsPerBlock}) {
    for (const Layout& layout : {Layout{{36, 5}}, Layout{{3000, 5}, 40}, Layout{{5000, 8}, 40},
                                 Layout{{36, 5}, 400, {int64_t{1} << 17, 7}}}) {
      Compare(layout, "", nullptr, warps);
      Compare(layout, "rowwise_adagrad { eps: 1e-8 initial_accumulator: 0.01 }", nullptr, warps);
      Compare(layout, "adam { beta1: 0.9 beta2: 0.999 eps: 1e-8 }", nullptr, warps);
    }
  }
}

// The kernels' shared-memory limit is the process's, not an object's: a backward of
// narrower tables (still past the default 48 KiB) prepared in between must not lower what
// a wider one's launches need.
TEST(CudaEmbeddingBackwardTest, ANarrowerObjectLeavesAWiderOnesSharedMemory) {
  SKIP_WITHOUT_GPU();
  OpenDevice(0);
  EmbeddingBackward wide;
  Compare(Layout{{16384, 5}}, "", &wide);
  Compare(Layout{{12288, 5}}, "");
  Compare(Layout{{16384, 5}}, "", &wide);
}

// Refused before anything reaches the device: no GPU needed.
TEST(CudaEmbeddingBackwardTest, BadArgumentsAreRefusedNamingThem) {
  EmbeddingBackward gpu;
  EmbeddingBackwardArgs a;
  a.num_tables = 1;
  a.batch_size = 1;
  a.max_dim = 4;
  a.pooled_width = 4;
  try {
    MakeSparseStepArgs(config::SparseOptimizerConfig(), 0.1f, 0);
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("step must be >= 1, got 0"));
  }
  const SparseStepArgs step_args = MakeSparseStepArgs(config::SparseOptimizerConfig(), 0.1f, 1);
  a.max_dim = 0;
  EXPECT_THROW(gpu.Run(a, &step_args, nullptr), Error);
  a.max_dim = 4;
  a.id_bits = 33;
  testing::ExpectError([&] { gpu.Run(a, &step_args, nullptr); }, StatusCode::kInvalidArgument,
                       "id_bits 33 is outside [0, 32]");
  a.id_bits = 4;
  // Each occurrence's d_pooled offset travels in 32 bits.
  a.batch_size = (int64_t{1} << 30) + 1;
  testing::ExpectError([&] { gpu.Run(a, &step_args, nullptr); }, StatusCode::kInvalidArgument,
                       "batch_size 1073741825 x pooled_width 4 is more than 2^32 pooled values");
  for (const int warps : {0, EmbeddingBackward::kMaxRowWarpsPerBlock + 1})
    testing::ExpectError([&] { EmbeddingBackward bad(warps); }, StatusCode::kInvalidArgument,
                         "row_warps " + std::to_string(warps) + " is outside [1, 8]");
}

// The sort keys take the bits the longest table needs, no more: ids < max_rows <= 2^32.
TEST(CudaEmbeddingBackwardTest, IdBitsAreTheLongestTablesOwn) {
  EXPECT_EQ(EmbeddingBackward::IdBitsFor(1), 0);
  EXPECT_EQ(EmbeddingBackward::IdBitsFor(2), 1);
  EXPECT_EQ(EmbeddingBackward::IdBitsFor(30), 5);
  EXPECT_EQ(EmbeddingBackward::IdBitsFor(1000000), 20);
  EXPECT_EQ(EmbeddingBackward::IdBitsFor(int64_t{1} << 20), 20);
  EXPECT_EQ(EmbeddingBackward::IdBitsFor((int64_t{1} << 20) + 1), 21);
  EXPECT_EQ(EmbeddingBackward::IdBitsFor(kMaxDeviceRows), 32);
  for (const int64_t rows : {int64_t{0}, kMaxDeviceRows + 1})
    testing::ExpectError([&] { EmbeddingBackward::IdBitsFor(rows); }, StatusCode::kInvalidArgument,
                         "is outside [1, 2^32]");
}

}  // namespace
}  // namespace dlrm::cuda

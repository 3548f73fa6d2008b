// The CUDA backend where there is a GPU (ctest label `gpu`; each test reports SKIPPED,
// with the runtime's reason, where there is none): the device probe, and the one-launch
// pooled forward against the CPU's order of operations, bitwise, over sum and mean,
// weighted and unweighted, empty and long bags, dims with and without float4 loads, and
// quantized (INT8 / INT4) serving tables.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "engine/core/philox.h"
#include "engine/core/status.h"
#include "engine/cuda/batch_staging.h"
#include "engine/cuda/device.h"
#include "engine/cuda/pooled_embedding.h"
#include "engine/embedding/quantized_row.h"
#include "tests/support/cuda_support.h"

namespace dlrm::cuda {
namespace {

using testing::DeviceCopy;

TEST(CudaDeviceTest, ProbeNamesTheCauseOrTheDevice) {
  if (DeviceCount() == 0) {
    EXPECT_FALSE(NoDeviceReason().empty());
    try {
      OpenDevice(0);
      ADD_FAILURE() << "OpenDevice succeeded without a device";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), StatusCode::kFailedPrecondition);
      EXPECT_NE(std::string(e.what()).find("no usable CUDA device: "), std::string::npos);
    }
    return;
  }
  const DeviceInfo info = OpenDevice(0);
  EXPECT_FALSE(info.name.empty());
  EXPECT_GE(info.compute_major, 8);
  EXPECT_THROW(OpenDevice(DeviceCount()), Error);
}

struct Feature {
  int rows, dim;
  bool mean;
};

// The CPU's portable loop (engine/embedding/embedding_bag.cc): ids in order, w * row then
// add, divide by the length for MEAN. C++17 without extensions: no FMA contraction.
std::vector<float> CpuPooled(const std::vector<Feature>& features,
                             const std::vector<std::vector<float>>& tables,
                             const std::vector<int64_t>& offsets, const std::vector<int64_t>& ids,
                             const std::vector<float>* weights, int64_t batch, int width) {
  std::vector<float> out(batch * width, -7.f);
  int offset = 0;
  for (size_t f = 0; f < features.size(); ++f) {
    for (int64_t b = 0; b < batch; ++b) {
      float* o = out.data() + b * width + offset;
      std::fill(o, o + features[f].dim, 0.f);
      const int64_t begin = offsets[f * batch + b], end = offsets[f * batch + b + 1];
      for (int64_t i = begin; i < end; ++i) {
        const float* row = tables[f].data() + ids[i] * features[f].dim;
        for (int k = 0; k < features[f].dim; ++k)
          o[k] += weights != nullptr ? (*weights)[i] * row[k] : row[k];
      }
      if (features[f].mean && end > begin)
        for (int k = 0; k < features[f].dim; ++k) o[k] /= static_cast<float>(end - begin);
    }
    offset += features[f].dim;
  }
  return out;
}

// A batch's bags, feature-major: bag (f, b) is ids[offsets[f * batch + b] ..).
struct Bags {
  std::vector<int64_t> offsets = {0}, ids;
  std::vector<float> weights;  // one per id
};

// Bags of `length(b)` ids (empty ones too) drawn from rng's values k, k + 1, ...
template <typename Length>
Bags RandomBags(const std::vector<Feature>& features, int64_t batch, const CounterRng& rng,
                uint64_t& k, Length length) {
  Bags bags;
  for (const Feature& f : features)
    for (int64_t b = 0; b < batch; ++b) {
      const int64_t len = length(b, rng.Uniform(k++));
      for (int64_t i = 0; i < len; ++i) {
        bags.ids.push_back(static_cast<int64_t>(rng.Uniform(k++) * f.rows));
        bags.weights.push_back(static_cast<float>(0.25 + rng.Uniform(k++)));
      }
      bags.offsets.push_back(static_cast<int64_t>(bags.ids.size()));
    }
  return bags;
}

// The one-launch forward of `specs` (device tables) over `bags`, [batch x width].
std::vector<float> DeviceForward(const std::vector<FeatureSpec>& specs, const Bags& bags,
                                 bool weighted, int64_t batch, int width) {
  const DeviceCopy<FeatureSpec> d_specs(specs);
  const DeviceCopy<int64_t> d_offsets(bags.offsets);
  const DeviceCopy<DeviceId> d_ids(testing::DeviceIds(bags.ids));
  const DeviceCopy<float> d_weights(bags.weights), d_out(std::vector<float>(batch * width, -7.f));
  PooledForwardArgs args;
  args.features = d_specs.get();
  args.num_features = static_cast<int32_t>(specs.size());
  args.batch_size = batch;
  args.offsets = d_offsets.get();
  args.ids = d_ids.get();
  args.weights = weighted ? d_weights.get() : nullptr;
  args.out = d_out.get();
  args.out_width = width;
  LaunchPooledForward(args, nullptr);
  CheckCuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  return d_out.ToHost();
}

void ExpectBitwise(const std::vector<float>& got, const std::vector<float>& want) {
  ASSERT_EQ(got.size(), want.size());
  EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0);
}

// Bags of 0 .. max_len - 1 ids.
void CheckForward(bool weighted, int max_len) {
  const std::vector<Feature> features = {{50, 16, false}, {30, 7, true}, {20, 64, true}};
  const int64_t batch = 37;
  const CounterRng rng(11, 3, weighted ? 1 : 0);
  uint64_t k = 0;
  std::vector<std::vector<float>> tables;
  for (const Feature& f : features) {
    tables.emplace_back(f.rows * f.dim);
    for (float& v : tables.back()) v = static_cast<float>(rng.Normal(k++));
  }
  const Bags bags = RandomBags(features, batch, rng, k, [&](int64_t, double u) {
    return static_cast<int64_t>(u * max_len);
  });
  int width = 0;
  std::vector<std::unique_ptr<DeviceCopy<float>>> device_tables;
  std::vector<FeatureSpec> specs;
  for (size_t f = 0; f < features.size(); ++f) {
    device_tables.push_back(std::make_unique<DeviceCopy<float>>(tables[f]));
    specs.push_back({device_tables.back()->get(), features[f].dim, width, features[f].mean});
    width += features[f].dim;
  }
  ExpectBitwise(DeviceForward(specs, bags, weighted, batch, width),
                CpuPooled(features, tables, bags.offsets, bags.ids,
                          weighted ? &bags.weights : nullptr, batch, width));
}

TEST(CudaPooledForwardTest, EqualsTheCpuLoopBitwiseUnweighted) {
  SKIP_WITHOUT_GPU();
  CheckForward(false, 5);
}

TEST(CudaPooledForwardTest, EqualsTheCpuLoopBitwiseWeighted) {
  SKIP_WITHOUT_GPU();
  CheckForward(true, 5);
}

// Bags longer than the kernel's batch of rows in flight, with a remainder.
TEST(CudaPooledForwardTest, EqualsTheCpuLoopBitwiseOnLongBags) {
  SKIP_WITHOUT_GPU();
  CheckForward(false, 70);
  CheckForward(true, 70);
}

// Quantized serving tables (INT8, INT4): the kernel pools from the codes as the CPU's
// PoolQuantizedBag does, bitwise; dims odd and even (INT4's last nibble alone), sum and
// mean, weighted or not, empty and long bags.
void CheckQuantizedForward(TablePrecision precision, bool weighted) {
  const std::vector<Feature> features = {{40, 16, false}, {30, 7, true}, {20, 33, false}};
  const int64_t batch = 29;
  const CounterRng rng(17, 5, weighted ? 1 : 0);
  uint64_t k = 0;
  std::vector<std::vector<uint8_t>> codes;
  for (const Feature& f : features) {
    const int64_t row_bytes = StoredRowBytes(precision, f.dim);
    codes.emplace_back(static_cast<size_t>(f.rows * row_bytes));
    std::vector<float> row(static_cast<size_t>(f.dim));
    for (int r = 0; r < f.rows; ++r) {
      for (float& v : row) v = static_cast<float>(rng.Normal(k++));
      QuantizeRow(row.data(), f.dim, precision, codes.back().data() + r * row_bytes);
    }
  }
  const Bags bags = RandomBags(features, batch, rng, k, [](int64_t b, double u) {
    return static_cast<int64_t>(u * (b % 5 == 0 ? 40 : 5));
  });
  int width = 0;
  std::vector<std::unique_ptr<DeviceCopy<uint8_t>>> device_codes;
  std::vector<FeatureSpec> specs;
  for (size_t f = 0; f < features.size(); ++f) {
    const auto row_bytes = static_cast<int32_t>(StoredRowBytes(precision, features[f].dim));
    device_codes.push_back(std::make_unique<DeviceCopy<uint8_t>>(codes[f]));
    specs.push_back({nullptr, features[f].dim, width, features[f].mean, nullptr, 0,
                     device_codes.back()->get(), precision == config::TableConfig::INT8 ? 8 : 4,
                     row_bytes});
    width += features[f].dim;
  }
  std::vector<float> want(static_cast<size_t>(batch * width), -7.f);
  for (size_t f = 0; f < features.size(); ++f) {
    const int64_t row_bytes = specs[f].row_bytes;
    for (int64_t b = 0; b < batch; ++b) {
      const int64_t begin = bags.offsets[f * batch + b], end = bags.offsets[f * batch + b + 1];
      std::vector<const void*> rows;
      for (int64_t i = begin; i < end; ++i)
        rows.push_back(codes[f].data() + bags.ids[i] * row_bytes);
      PoolQuantizedBag(rows.data(), end - begin, 0,
                       weighted ? bags.weights.data() + begin : nullptr, features[f].mean,
                       features[f].dim, precision, want.data() + b * width + specs[f].out_offset);
    }
  }
  ExpectBitwise(DeviceForward(specs, bags, weighted, batch, width), want);
}

TEST(CudaPooledForwardTest, QuantizedTablesPoolAsTheCpuDoesBitwise) {
  SKIP_WITHOUT_GPU();
  for (const TablePrecision p : {config::TableConfig::INT8, config::TableConfig::INT4}) {
    SCOPED_TRACE(config::TableConfig::Precision_Name(p));
    CheckQuantizedForward(p, false);
    CheckQuantizedForward(p, true);
  }
}

// A desk review's findings (2026-11-28): a failed cudaMalloc stayed the runtime's last
// error, so the next launch's check threw it as its own (a harmless failed prefetch failed
// the next step, or turned CUDA graphs off); and a Reserve that failed after an earlier
// array moved kept its generation, so a graph of the slot replayed over freed memory.
TEST(CudaDeviceTest, AFailedAllocationIsThrownOnceAndMovesTheGeneration) {
  SKIP_WITHOUT_GPU();
  std::vector<float> dense(4), weights(8);
  BatchView view;
  view.batch_size = 4;
  view.num_dense = 1;
  view.dense = dense.data();
  view.num_ids = 8;
  view.weights = weights.data();
  DeviceBatch batch;
  batch.Reserve(view, 5, /*with_labels=*/true);
  const uint64_t before = batch.generation;
  view.num_ids = int64_t{1} << 45;  // 128 TiB of ids: more than any device has
  try {
    batch.Reserve(view, 5, true);
    ADD_FAILURE() << "a reservation of 2^45 ids succeeded";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), StatusCode::kInternal);
    EXPECT_NE(std::string(e.what()).find("cudaMalloc of"), std::string::npos) << e.what();
  }
  EXPECT_NE(batch.generation, before);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

TEST(CudaPooledForwardTest, NegativeSizesAreRefusedByName) {
  PooledForwardArgs args;
  args.batch_size = -1;
  try {
    LaunchPooledForward(args, nullptr);
    ADD_FAILURE() << "accepted batch_size -1";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("batch -1"), std::string::npos);
  }
}

}  // namespace
}  // namespace dlrm::cuda

#include "tests/support/test_support.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "engine/core/philox.h"

namespace dlrm::testing {

std::string TempDir(const std::string& name) {
  const char* base = std::getenv("DLRM_TEST_TMPDIR");
  std::filesystem::path dir = base ? base : std::filesystem::temp_directory_path();
  dir /= name + "." + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir.string();
}

std::string FileContents(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::string SmallConfigText(const std::string& optimizers, int num_threads, int chunk_rows,
                            uint64_t seed) {
  return R"(
model {
  num_dense_features: 4
  tables { name: "t0" num_rows: 40 dim: 4 }
  tables { name: "t1" num_rows: 25 dim: 4 initializer { kind: NORMAL stddev: 0.3 } }
  sparse_features { name: "f0" table: "t0" }
  sparse_features { name: "f1" table: "t1" pooling: MEAN }
  sparse_features { name: "f2" table: "t0" }
  bottom_mlp { layer_sizes: 8 layer_sizes: 4 }
  top_mlp { layer_sizes: 8 layer_sizes: 4 layer_sizes: 1 }
}
)" + optimizers +
         "\nnum_threads: " + std::to_string(num_threads) +
         "\nreduction_chunk_rows: " + std::to_string(chunk_rows) +
         "\nseed: " + std::to_string(seed) + "\n";
}

OwnedBatch SmallBatch(int64_t batch_size, uint64_t salt, bool weighted) {
  const CounterRng rng(salt, 99, 0);
  uint64_t draw = 0;
  auto uniform = [&] { return rng.Uniform(draw++); };
  OwnedBatch b;
  b.batch_size = batch_size;
  b.num_dense = 4;
  b.num_sparse = 3;
  const int64_t rows[3] = {40, 25, 40};
  for (int64_t i = 0; i < batch_size * 4; ++i)
    b.dense.push_back(static_cast<float>(uniform() * 2 - 1));
  for (int f = 0; f < 3; ++f) {
    for (int64_t s = 0; s < batch_size; ++s) {
      const int32_t len = static_cast<int32_t>(uniform() * 4);  // 0..3
      b.lengths.push_back(len);
      for (int32_t k = 0; k < len; ++k) {
        // Skewed ids so that rows repeat within and across bags.
        const double u = uniform();
        b.ids.push_back(static_cast<int64_t>(u * u * rows[f]));
        if (weighted) b.weights.push_back(static_cast<float>(0.5 + uniform()));
      }
    }
  }
  for (int64_t s = 0; s < batch_size; ++s) {
    const float signal = b.dense[s * 4] + 0.5f * b.dense[s * 4 + 1];
    b.labels.push_back(signal + 0.3 * (uniform() - 0.5) > 0 ? 1.0f : 0.0f);
  }
  return b;
}

OwnedBatch SmallBatchOfRows(int64_t t0_first, int64_t t1_first, uint64_t salt, bool zero_dense) {
  constexpr int64_t kSamples = 4, kLength = 3;
  OwnedBatch b = SmallBatch(kSamples, salt);
  b.lengths.assign(3 * kSamples, kLength);
  b.ids.clear();
  for (const int64_t first : {t0_first, t1_first, t0_first})
    for (int64_t i = 0; i < kSamples * kLength; ++i) b.ids.push_back(first + i);
  if (zero_dense) std::fill(b.dense.begin(), b.dense.end(), 0.0f);
  return b;
}

std::map<std::string, std::vector<float>> ParameterValues(const Engine& engine) {
  std::map<std::string, std::vector<float>> params;
  for (const ParameterInfo& info : engine.Parameters()) {
    std::vector<float> values(static_cast<size_t>(info.size()));
    engine.ReadParameter(info.name, values.data(), info.size());
    params[info.name] = std::move(values);
  }
  return params;
}

bool BitwiseEqual(const std::map<std::string, std::vector<float>>& a,
                  const std::map<std::string, std::vector<float>>& b) {
  if (a.size() != b.size()) return false;
  for (const auto& [name, values] : a) {
    const auto it = b.find(name);
    if (it == b.end() || it->second.size() != values.size() ||
        std::memcmp(values.data(), it->second.data(), values.size() * sizeof(float)) != 0)
      return false;
  }
  return true;
}

}  // namespace dlrm::testing

// Synthetic batches for benchmarks (`dlrm bench`, bench/micro): the shape of real traffic
// without its meaning, so that kernels see realistic id skew and bag sizes.
//
//  - ids: Zipf(zipf_exponent) ranks over [1, 2^40) taken modulo the table's rows (the
//    numpy idiom `zipf(s) % rows`: id 0 is the hottest row); zipf_exponent 0 draws ids
//    uniformly over the table instead (the cache-hostile extreme);
//  - every bag of feature f holds exactly feature_bags[f] ids, unweighted (one bag_size for
//    all, or each feature's pooling_factor: MLPerf DLRM-DCNv2's multi-hot sizes);
//  - dense: log1p of a log-normal count (the Criteo preprocessing of a Criteo-like count);
//  - labels: Bernoulli(0.25), independent of the features (nothing is to be learned).
//
// Batch i is a pure function of (spec, i) (counter-based RNG), so a pool of batches can
// be generated in parallel and is the same for any thread count.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "engine/config/dlrm.pb.h"
#include "engine/core/zipf.h"
#include "engine/data/batch.h"

namespace dlrm::tools {

struct BenchDataSpec {
  int32_t num_dense = 13;
  std::vector<int64_t> feature_rows;  // per sparse feature: its table's num_rows
  std::vector<int32_t> feature_bags;  // per sparse feature: ids in each bag (0: empty)
  int64_t batch_size = 2048;
  double zipf_exponent = 1.2;  // > 0, or 0 for uniform ids
  uint64_t seed = 1;
};

// bag_size kBagsFromConfig: each feature's bags hold its pooling_factor (rounded) ids.
inline constexpr int32_t kBagsFromConfig = -1;

// The data shape a model config reads: num_dense and each feature's table rows, with
// bag_size ids per bag (or kBagsFromConfig).
BenchDataSpec BenchDataSpecFor(const config::ModelConfig& model, int64_t batch_size,
                               int32_t bag_size, double zipf_exponent, uint64_t seed);

class BenchDataGenerator {
 public:
  // Throws dlrm::Error(kInvalidArgument) naming the bad field of spec.
  explicit BenchDataGenerator(BenchDataSpec spec);

  // Batch number `index` (>= 0).
  OwnedBatch Batch(int64_t index) const;
  // Batches [0, count), generated on num_threads threads.
  std::vector<OwnedBatch> Batches(int64_t count, int num_threads) const;

  const BenchDataSpec& spec() const { return spec_; }

 private:
  int64_t DrawId(int32_t feature, uint64_t occurrence) const;

  BenchDataSpec spec_;
  // Ranks [1, kZipfRanks], the same for every feature (only the modulus differs); unset
  // for uniform ids.
  std::optional<ZipfSampler> zipf_;
};

}  // namespace dlrm::tools

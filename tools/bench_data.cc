#include "tools/bench_data.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "engine/config/config.h"
#include "engine/core/philox.h"
#include "engine/core/status.h"
#include "engine/core/thread_pool.h"

namespace dlrm::tools {
namespace {

// Streams of our own under the synthetic-data stream, so that bench data never reuses the
// numbers of the Criteo-like generator (not that it would matter: it is only data).
constexpr uint64_t kBenchStream = kStreamSynthetic | (uint64_t{1} << 39);
constexpr uint64_t kDenseStream = kBenchStream + 0;
constexpr uint64_t kLabelStream = kBenchStream + 1;
constexpr uint64_t kIdStreamBase = kBenchStream + 2;  // + feature

// Zipf ranks are drawn over [1, 2^40): wide enough that the cut-off tail is negligible
// (for s = 1.2 about 0.4% of an unbounded Zipf's mass lies beyond it) and small enough
// that a double still resolves every rank near the end.
constexpr double kZipfRanks = 1099511627776.0;  // 2^40
constexpr double kLabelRate = 0.25;             // Criteo-like click rate
constexpr double kDenseLogMean = 1.0, kDenseLogStddev = 1.5;
// Occurrence numbers address the RNG counter as (occurrence << kAttemptBits | attempt / 2)
// and CounterRng indices must stay below 2^44, so both are bounded well inside 64 bits.
constexpr int kAttemptBits = 8;
constexpr uint64_t kMaxZipfAttempts = uint64_t{2} << kAttemptBits;
constexpr int64_t kMaxIndex = int64_t{1} << 44;
constexpr int64_t kMaxBatchSize = int64_t{1} << 24;
constexpr int32_t kMaxBagSize = 1 << 12;

// Uniform in (0, 1) with 53 random bits, from two Philox words: the Zipf tail needs more
// resolution than CounterRng's 24-bit uniforms give.
double Unit53(uint32_t hi, uint32_t lo) {
  const uint64_t bits = (static_cast<uint64_t>(hi) << 21) | (lo >> 11);
  return (static_cast<double>(bits) + 0.5) * (1.0 / 9007199254740992.0);  // 2^-53
}

}  // namespace

BenchDataSpec BenchDataSpecFor(const config::ModelConfig& model, int64_t batch_size,
                               int32_t bag_size, double zipf_exponent, uint64_t seed) {
  BenchDataSpec spec;
  spec.num_dense = model.num_dense_features();
  for (const auto& feature : model.sparse_features()) {
    const int t = FindTable(model, feature.table());
    if (t < 0)
      ThrowInvalid("sparse feature '", feature.name(), "' names unknown table '", feature.table(),
                   "'");
    spec.feature_rows.push_back(model.tables(t).num_rows());
    spec.feature_bags.push_back(bag_size == kBagsFromConfig
                                    ? static_cast<int32_t>(std::lround(feature.pooling_factor()))
                                    : bag_size);
  }
  spec.batch_size = batch_size;
  spec.zipf_exponent = zipf_exponent;
  spec.seed = seed;
  return spec;
}

BenchDataGenerator::BenchDataGenerator(BenchDataSpec spec) : spec_(std::move(spec)) {
  if (spec_.num_dense < 0)
    ThrowInvalid("bench data: num_dense must be >= 0, got ", spec_.num_dense);
  for (size_t f = 0; f < spec_.feature_rows.size(); ++f) {
    if (spec_.feature_rows[f] <= 0)
      ThrowInvalid("bench data: feature_rows[", f, "] must be > 0, got ", spec_.feature_rows[f]);
  }
  if (spec_.batch_size <= 0 || spec_.batch_size > kMaxBatchSize)
    ThrowInvalid("bench data: batch_size must be in [1, ", kMaxBatchSize, "], got ",
                 spec_.batch_size);
  if (spec_.feature_bags.size() != spec_.feature_rows.size())
    ThrowInvalid("bench data: ", spec_.feature_bags.size(), " feature_bags for ",
                 spec_.feature_rows.size(), " features");
  for (size_t f = 0; f < spec_.feature_bags.size(); ++f)
    if (spec_.feature_bags[f] < 0 || spec_.feature_bags[f] > kMaxBagSize)
      ThrowInvalid("bench data: feature_bags[", f, "] must be in [0, ", kMaxBagSize, "], got ",
                   spec_.feature_bags[f]);
  const double s = spec_.zipf_exponent;
  if (!std::isfinite(s) || s < 0)
    ThrowInvalid("bench data: zipf exponent must be finite and >= 0 (0 = uniform), got ", s);
  if (s > 0) zipf_.emplace(s, kZipfRanks);
}

int64_t BenchDataGenerator::DrawId(int32_t feature, uint64_t occurrence) const {
  const auto rows = static_cast<uint64_t>(spec_.feature_rows[feature]);
  const uint64_t stream = kIdStreamBase + static_cast<uint64_t>(feature);
  if (!zipf_) {
    const auto w = Philox4x32(spec_.seed, stream, occurrence << kAttemptBits);
    const uint64_t bits = (static_cast<uint64_t>(w[0]) << 32) | w[1];
    return static_cast<int64_t>(bits % rows);  // bias < rows / 2^64: negligible
  }
  for (uint64_t attempt = 0; attempt < kMaxZipfAttempts; ++attempt) {
    const auto w = Philox4x32(spec_.seed, stream, (occurrence << kAttemptBits) | (attempt >> 1));
    const double unit = (attempt & 1) ? Unit53(w[2], w[3]) : Unit53(w[0], w[1]);
    if (const std::optional<double> k = zipf_->TryRank(unit))
      return static_cast<int64_t>((static_cast<uint64_t>(*k) - 1) % rows);
  }
  // The hat hugs the density, so nearly every first attempt is accepted.
  Throw(StatusCode::kInternal, "bench data: Zipf sampling did not converge");
}

OwnedBatch BenchDataGenerator::Batch(int64_t index) const {
  const int64_t B = spec_.batch_size;
  const int32_t num_dense = spec_.num_dense;
  const auto num_sparse = static_cast<int32_t>(spec_.feature_rows.size());
  int64_t widest = 1, ids_per_sample = 0;
  for (const int32_t bag : spec_.feature_bags) {
    widest = std::max<int64_t>(widest, bag);
    ids_per_sample += bag;
  }
  if (index < 0 || index >= kMaxIndex / (B * widest))
    Throw(StatusCode::kOutOfRange, "bench data: batch index ", index, " is out of range");

  OwnedBatch batch;
  batch.batch_size = B;
  batch.num_dense = num_dense;
  batch.num_sparse = num_sparse;
  batch.dense.resize(static_cast<size_t>(B * num_dense));
  batch.labels.resize(static_cast<size_t>(B));
  batch.lengths.resize(static_cast<size_t>(num_sparse * B));
  for (int32_t f = 0; f < num_sparse; ++f)
    std::fill(batch.lengths.begin() + f * B, batch.lengths.begin() + (f + 1) * B,
              spec_.feature_bags[static_cast<size_t>(f)]);
  batch.ids.resize(static_cast<size_t>(B * ids_per_sample));
  for (int64_t b = 0; b < B; ++b) {
    const auto sample = static_cast<uint64_t>(index * B + b);
    const CounterRng dense_rng(spec_.seed, kDenseStream, sample);
    for (int32_t j = 0; j < num_dense; ++j) {
      const double count = std::exp(kDenseLogMean + kDenseLogStddev * dense_rng.Normal(j));
      batch.dense[b * num_dense + j] = static_cast<float>(std::log1p(count));
    }
    const CounterRng label_rng(spec_.seed, kLabelStream, sample);
    batch.labels[b] = label_rng.Uniform(0) < kLabelRate ? 1.0f : 0.0f;
  }
  // Feature f's bags hold `bag` ids each: its ids follow the earlier features', and its
  // occurrences are numbered per feature, so a batch is the same whatever the others hold.
  int64_t* ids = batch.ids.data();
  for (int32_t f = 0; f < num_sparse; ++f) {
    const int64_t bag = spec_.feature_bags[static_cast<size_t>(f)];
    const auto first_occurrence = static_cast<uint64_t>(index * B * bag);
    for (int64_t i = 0; i < B * bag; ++i) ids[i] = DrawId(f, first_occurrence + i);
    ids += B * bag;
  }
  return batch;
}

std::vector<OwnedBatch> BenchDataGenerator::Batches(int64_t count, int num_threads) const {
  if (count < 0) ThrowInvalid("bench data: batch count must be >= 0, got ", count);
  std::vector<OwnedBatch> batches(static_cast<size_t>(count));
  ThreadPool pool(std::max(1, num_threads));
  pool.ParallelFor(count, [&](int64_t i) { batches[i] = Batch(i); });
  return batches;
}

}  // namespace dlrm::tools

// BM_ValidateBatch: the host's check of a training batch before any step (ValidateBatch:
// dense and labels finite, lengths, the bag offsets, every id in its table's range), on the
// reference models' shapes at batch 8192, the GPU bench's batch (bench/cuda), where it is
// part of every step's host time (Engine::step_phases' `validate`). Threads: 1, and every
// core as the engine's pool. Bytes processed: the batch's arrays read (dense, labels,
// lengths, ids) and the offsets written.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "bench/micro/micro_bench.h"
#include "engine/core/thread_pool.h"
#include "engine/data/batch.h"
#include "tools/bench_data.h"

namespace dlrm::bench {
namespace {

constexpr int64_t kBatchSize = 8192;
constexpr int64_t kNumBatches = 4;

struct Batches {
  std::vector<OwnedBatch> owned;
  std::vector<SparseFeatureSpec> specs;
  int64_t bytes = 0;  // per batch
};

std::unique_ptr<Batches> MakeBatches(const ReferenceModel& model) {
  auto b = std::make_unique<Batches>();
  const tools::BenchDataGenerator generator(tools::BenchDataSpecFor(
      model.config.model(), kBatchSize, model.bag_size, /*zipf_exponent=*/1.2, /*seed=*/1));
  b->owned = generator.Batches(kNumBatches, MaxThreads());
  const auto& m = model.config.model();
  for (int f = 0; f < m.sparse_features_size(); ++f)
    for (int t = 0; t < m.tables_size(); ++t)
      if (m.tables(t).name() == m.sparse_features(f).table())
        b->specs.push_back({t, m.tables(t).num_rows()});
  const OwnedBatch& first = b->owned.front();
  b->bytes = static_cast<int64_t>(first.dense.size() * 4 + first.labels.size() * 4 +
                                  first.lengths.size() * (4 + 8) + first.ids.size() * 8);
  return b;
}

void RegisterFor(const ReferenceModel& model) {
  auto batches = std::make_shared<Lazy<Batches>>([model] { return MakeBatches(model); });
  const int32_t num_dense = model.config.model().num_dense_features();
  for (const int threads : {1, MaxThreads()}) {
    const std::string name =
        "BM_ValidateBatch/" + model.name + "/threads:" + std::to_string(threads);
    benchmark::RegisterBenchmark(name.c_str(),
                                 [=](benchmark::State& state) {
                                   Batches& b = batches->Get();
                                   ThreadPool pool(threads);
                                   int64_t i = 0;
                                   for (auto _ : state) {
                                     const ValidatedBatch valid =
                                         ValidateBatch(b.owned[i++ % kNumBatches].view(), num_dense,
                                                       b.specs, true, &pool);
                                     benchmark::DoNotOptimize(valid.offsets.data());
                                   }
                                   state.SetItemsProcessed(state.iterations() * kBatchSize);
                                   state.SetBytesProcessed(state.iterations() * b.bytes);
                                 })
        ->Unit(benchmark::kMicrosecond)
        ->UseRealTime();
    if (MaxThreads() == 1) break;
  }
}

}  // namespace

void RegisterBatchBenchmarks(const std::vector<ReferenceModel>& models) {
  for (const ReferenceModel& model : models) RegisterFor(model);
}

}  // namespace dlrm::bench

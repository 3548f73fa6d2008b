// dlrm_micro_bench: Google Benchmark over the engine's kernels. Accepts every
// --benchmark_* flag (e.g. --benchmark_filter=Gather --benchmark_min_time=0.5); see
// bench/README.md.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <thread>

#include "bench/micro/micro_bench.h"

namespace dlrm::bench {

int MaxThreads() { return static_cast<int>(std::max(1u, std::thread::hardware_concurrency())); }

void FillPattern(float* values, int64_t count, float scale, uint64_t salt) {
  // A multiplicative hash of the index: fast enough for gigabytes, no visible structure.
  uint64_t state = salt * 0x9E3779B97F4A7C15ull + 1;
  for (int64_t i = 0; i < count; ++i) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    const auto bits = static_cast<uint32_t>(state >> 40);  // 24 bits
    values[i] = scale * (static_cast<float>(bits) * (2.0f / 16777216.0f) - 1.0f);
  }
}

}  // namespace dlrm::bench

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  try {
    const auto models = dlrm::bench::LoadReferenceModels();
    dlrm::bench::RegisterGatherBenchmarks();
    dlrm::bench::RegisterEmbeddingBenchmarks(models);
    dlrm::bench::RegisterDenseBenchmarks(models);
    dlrm::bench::RegisterIdIndexBenchmarks();
    dlrm::bench::RegisterBatchBenchmarks(models);
    benchmark::RunSpecifiedBenchmarks();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dlrm_micro_bench: %s\n", e.what());
    return 1;
  }
  benchmark::Shutdown();
  return 0;
}

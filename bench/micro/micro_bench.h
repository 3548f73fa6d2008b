// Google Benchmark micro-benchmarks of the engine's kernels (dlrm_micro_bench).
//
// Benchmarks are registered at run time from the reference configs in bench/configs, so
// the measured shapes are always those of the models `dlrm bench` runs. Every benchmark
// reports items/s and bytes/s (the least memory traffic the kernel must do), so that
// embedding kernels can be read as a fraction of the machine's random-gather bandwidth
// (BM_RandomGather) and GEMMs against their FLOP/s counter.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "engine/config/dlrm.pb.h"

namespace dlrm::bench {

// A reference model and the data shape it is benchmarked with (the `dlrm bench` flags
// written at the top of its config).
struct ReferenceModel {
  std::string name;  // "small", "multihot"
  config::DlrmConfig config;
  int64_t batch_size = 0;
  int32_t bag_size = 0;
};

// Reads bench/configs/{small,multihot}.pbtxt from $DLRM_BENCH_CONFIG_DIR, or from the
// source tree this binary was built from. (kaggle.pbtxt has small's dense shapes; its
// tables differ only in size, which BM_RandomGather covers.)
std::vector<ReferenceModel> LoadReferenceModels();

void RegisterEmbeddingBenchmarks(const std::vector<ReferenceModel>& models);
void RegisterDenseBenchmarks(const std::vector<ReferenceModel>& models);
void RegisterGatherBenchmarks();
void RegisterIdIndexBenchmarks();
void RegisterBatchBenchmarks(const std::vector<ReferenceModel>& models);

// Threads a multi-threaded benchmark runs with besides 1: every logical core.
int MaxThreads();

// A fixture built on first use and shared by the benchmarks that capture it, so that a
// filtered run never allocates what it does not measure (the multihot tables are 6.7 GB)
// and repeated runs of one benchmark do not rebuild it. Safe to Get() from several
// benchmark threads at once.
template <typename T>
class Lazy {
 public:
  explicit Lazy(std::function<std::unique_ptr<T>()> make) : make_(std::move(make)) {}
  T& Get() {
    std::call_once(once_, [this] { value_ = make_(); });
    return *value_;
  }

 private:
  std::function<std::unique_ptr<T>()> make_;
  std::once_flag once_;
  std::unique_ptr<T> value_;
};

// Fills values with a cheap deterministic pattern in [-scale, scale): benchmark inputs
// need plausible magnitudes (no denormals, no overflow), not statistical quality.
void FillPattern(float* values, int64_t count, float scale, uint64_t salt);

}  // namespace dlrm::bench

// BM_RandomGather: the machine's random-gather memory bandwidth, the ceiling of an
// embedding lookup whose rows are not in cache.
//
// Rows of a 1 GiB table (far beyond any last-level cache) are read at uniformly random
// indices and summed in registers, as a pooled lookup sums a bag. Indices come
// from a precomputed 64 MiB array walked in order, so the index stream costs what an
// embedding bag's id stream costs and the rows of one iteration are not those of the
// last. Only row bytes count as bytes processed.
//
// pages:4k is what the engine's tables get today (std::vector memory, transparent huge
// pages off or madvise-only); pages:huge asks for 2 MiB pages (MADV_HUGEPAGE), which
// removes most TLB misses (and, in a VM, most nested page walks) from random lookups.
// The label says how much of the table the kernel actually backed with huge pages.
#include <benchmark/benchmark.h>
#include <sys/mman.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <new>
#include <sstream>
#include <string>
#include <vector>

#include "bench/micro/micro_bench.h"

namespace dlrm::bench {
namespace {

constexpr int64_t kTableBytes = int64_t{1} << 30;
constexpr int64_t kNumIndices = int64_t{1} << 23;  // 8M lookups before repeating
constexpr int64_t kLookupsPerIteration = int64_t{1} << 16;
// Rows are prefetched this many lookups ahead (the indices are known in advance, as an
// embedding bag's are, and the engine's kernels prefetch as far), so the probe keeps
// several misses in flight: without it, it measured little more than the memory latency,
// and the engine's AVX2 forward read uniform rows 2.4x faster than that "ceiling".
constexpr int64_t kPrefetchAhead = 8;

constexpr size_t kHugePage = size_t{2} << 20;

// An anonymous mapping aligned to 2 MiB (so that huge pages can back all of it), with
// transparent huge pages requested or refused explicitly.
class GatherTable {
 public:
  GatherTable(size_t bytes, bool huge_pages) : mapped_(bytes + kHugePage) {
    base_ = mmap(nullptr, mapped_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base_ == MAP_FAILED) throw std::bad_alloc();
    const auto addr = reinterpret_cast<uintptr_t>(base_);
    data_ = reinterpret_cast<float*>((addr + kHugePage - 1) & ~(kHugePage - 1));
    // Advice only: a kernel without THP leaves 4 KiB pages, which the label reports.
    madvise(data_, bytes, huge_pages ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
    FillPattern(data_, static_cast<int64_t>(bytes / sizeof(float)), 0.01f, 1);
    huge_bytes_ = AnonHugeBytes(data_);
  }
  ~GatherTable() { munmap(base_, mapped_); }
  GatherTable(const GatherTable&) = delete;
  GatherTable& operator=(const GatherTable&) = delete;

  const float* data() const { return data_; }
  int64_t huge_bytes() const { return huge_bytes_; }

 private:
  // AnonHugePages of the mapping that holds addr, from /proc/self/smaps (-1 if unknown).
  static int64_t AnonHugeBytes(const void* addr) {
    std::ifstream smaps("/proc/self/smaps");
    const auto target = reinterpret_cast<uintptr_t>(addr);
    std::string line;
    bool inside = false;
    while (std::getline(smaps, line)) {
      uintptr_t start = 0, end = 0;
      char dash = 0;
      std::istringstream head(line);
      if (head >> std::hex >> start >> dash >> end && dash == '-') {
        inside = start <= target && target < end;
      } else if (inside && line.rfind("AnonHugePages:", 0) == 0) {
        return std::stoll(line.substr(14)) * 1024;  // "AnonHugePages:  N kB"
      }
    }
    return -1;
  }

  size_t mapped_;
  void* base_ = nullptr;
  float* data_ = nullptr;
  int64_t huge_bytes_ = -1;
};

struct GatherIndices {
  std::vector<int64_t> rows;
};

// num_rows is a power of two, so a mask maps random bits to a row uniformly.
std::unique_ptr<GatherIndices> MakeIndices(int64_t num_rows, uint64_t seed) {
  auto indices = std::make_unique<GatherIndices>();
  indices->rows.resize(static_cast<size_t>(kNumIndices));
  uint64_t state = seed;
  for (int64_t& row : indices->rows) {
    // splitmix64
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    row = static_cast<int64_t>((z ^ (z >> 31)) & static_cast<uint64_t>(num_rows - 1));
  }
  return indices;
}

void RandomGather(benchmark::State& state, int dim, std::shared_ptr<Lazy<GatherTable>> table,
                  std::shared_ptr<Lazy<GatherIndices>> indices) {
  const float* values = table->Get().data();
  const int64_t* rows = indices->Get().rows.data();
  // Four accumulators of 8 floats (two SSE registers each on baseline x86-64, one AVX
  // register where the compiler may use it): nothing is stored per row, so the loop
  // measures reading rows only.
  using Lanes = float __attribute__((vector_size(32)));
  Lanes acc[4] = {};
  // Threads start far apart in the index array, so they do not share rows.
  int64_t next = (kNumIndices / state.threads()) * state.thread_index();
  for (auto _ : state) {
    for (int64_t i = 0; i < kLookupsPerIteration; ++i) {
      int64_t ahead = next + kPrefetchAhead;
      if (ahead >= kNumIndices) ahead -= kNumIndices;
      const char* soon = reinterpret_cast<const char*>(values + rows[ahead] * dim);
      for (int64_t off = 0; off < dim * static_cast<int64_t>(sizeof(float)); off += 64)
        __builtin_prefetch(soon + off);
      const float* row = values + rows[next] * dim;
      for (int k = 0; k < dim; k += 8) {
        Lanes v;
        std::memcpy(&v, row + k, sizeof v);
        acc[(k / 8) & 3] += v;
      }
      next = next + 1 == kNumIndices ? 0 : next + 1;
    }
    benchmark::DoNotOptimize(acc);
    benchmark::ClobberMemory();
  }
  const int64_t lookups = state.iterations() * kLookupsPerIteration;
  state.SetItemsProcessed(lookups);
  state.SetBytesProcessed(lookups * dim * static_cast<int64_t>(sizeof(float)));
  char label[64];
  std::snprintf(label, sizeof label, "1 GiB table, %.0f%% in huge pages",
                100.0 * static_cast<double>(table->Get().huge_bytes()) / kTableBytes);
  state.SetLabel(label);
}

}  // namespace

void RegisterGatherBenchmarks() {
  // One table per page size and one index array per dim, each shared by the benchmarks
  // that read it.
  std::shared_ptr<Lazy<GatherTable>> tables[2];  // [huge]
  for (const bool huge : {false, true}) {
    tables[huge] = std::make_shared<Lazy<GatherTable>>(
        [huge] { return std::make_unique<GatherTable>(kTableBytes, huge); });
  }
  for (const int dim : {16, 64}) {
    const int64_t num_rows = kTableBytes / (dim * static_cast<int64_t>(sizeof(float)));
    auto indices = std::make_shared<Lazy<GatherIndices>>(
        [num_rows, dim] { return MakeIndices(num_rows, static_cast<uint64_t>(dim)); });
    for (const bool huge : {false, true}) {
      const std::string name =
          "BM_RandomGather/dim:" + std::to_string(dim) + (huge ? "/pages:huge" : "/pages:4k");
      auto* b =
          benchmark::RegisterBenchmark(name.c_str(), RandomGather, dim, tables[huge], indices);
      b->UseRealTime()->Threads(1);
      if (MaxThreads() > 1) b->Threads(MaxThreads());
    }
  }
}

}  // namespace dlrm::bench

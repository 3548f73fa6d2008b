// The dynamic table's id -> row map (engine/embedding/id_index.h) against the hash maps a
// user would otherwise reach for, on the same ids in the same run (issue 14, acceptance 5):
//  BM_IdLookup/map:M/ids:N/dist:D  lookups of resident ids (all hits), N raw 64-bit ids
//    resident, drawn uniformly or Zipf(1.2) over them, at 1 thread and every core;
//    map:dlrm_batch is IdIndex::FindBatch over 4096 ids (a step's lookups, prefetched),
//    map:dlrm is IdIndex::Find one id at a time, map:absl absl::flat_hash_map::find,
//    map:std std::unordered_map::find (both int64 -> int64, reserved for N);
//  BM_IdInsert/map:M/ids:N  N new ids into an empty map sized for them (construction not
//    timed).
// items/s are lookups or inserts. The ids are splitmix64 outputs: hashed feature values
// as a pipeline emits them.
#include <absl/container/flat_hash_map.h>
#include <benchmark/benchmark.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "bench/micro/micro_bench.h"
#include "engine/core/zipf.h"
#include "engine/embedding/id_index.h"

namespace dlrm::bench {
namespace {

constexpr int64_t kBatch = 4096;
constexpr int64_t kNumLookups = int64_t{1} << 22;  // cycled; distinct per thread

uint64_t SplitMix(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// The resident ids, and lookups drawn from them (kNumLookups of them).
struct IdSet {
  std::vector<int64_t> ids;
};
struct Lookups {
  std::vector<int64_t> ids;
};

std::unique_ptr<IdSet> MakeIds(int64_t n) {
  auto set = std::make_unique<IdSet>();
  uint64_t state = static_cast<uint64_t>(n);
  for (int64_t i = 0; i < n; ++i) set->ids.push_back(static_cast<int64_t>(SplitMix(state)));
  return set;
}

std::unique_ptr<Lookups> MakeLookups(const IdSet& set, bool zipf) {
  auto lookups = std::make_unique<Lookups>();
  const auto n = static_cast<int64_t>(set.ids.size());
  const ZipfSampler sampler(1.2, static_cast<double>(n));
  uint64_t state = zipf ? 2 : 1;
  while (static_cast<int64_t>(lookups->ids.size()) < kNumLookups) {
    const double u = (static_cast<double>(SplitMix(state) >> 11) + 0.5) * 0x1.0p-53;
    auto k = static_cast<int64_t>(u * static_cast<double>(n));
    if (zipf) {
      const std::optional<double> rank = sampler.TryRank(u);
      if (!rank) continue;
      // Ranks are spread over the ids by a multiplicative step, so hot ids are not adjacent.
      k = static_cast<int64_t>((static_cast<uint64_t>(*rank - 1) * 0x9E3779B1ull) %
                               static_cast<uint64_t>(n));
    }
    lookups->ids.push_back(set.ids[static_cast<size_t>(k)]);
  }
  return lookups;
}

// The three maps, filled with the same ids (row i for ids[i]).
struct Maps {
  explicit Maps(const IdSet& set) : dlrm(static_cast<int64_t>(set.ids.size())) {
    absl.reserve(set.ids.size());
    std_map.reserve(set.ids.size());
    for (const int64_t id : set.ids) {
      const int64_t row = dlrm.Insert(id);
      absl.emplace(id, row);
      std_map.emplace(id, row);
    }
  }
  IdIndex dlrm;
  absl::flat_hash_map<int64_t, int64_t> absl;
  std::unordered_map<int64_t, int64_t> std_map;
};

enum class Map { kDlrmBatch, kDlrm, kAbsl, kStd };
const char* NameOf(Map m) {
  switch (m) {
    case Map::kDlrmBatch: return "dlrm_batch";
    case Map::kDlrm: return "dlrm";
    case Map::kAbsl: return "absl";
    default: return "std";
  }
}

// One batch of lookups from `from`; returns a sum of the rows (kept alive).
int64_t LookupBatch(const Maps& maps, Map map, const int64_t* from, int64_t* rows) {
  int64_t sum = 0;
  switch (map) {
    case Map::kDlrmBatch:
      maps.dlrm.FindBatch(from, kBatch, rows);
      for (int64_t i = 0; i < kBatch; ++i) sum += rows[i];
      break;
    case Map::kDlrm:
      for (int64_t i = 0; i < kBatch; ++i) sum += maps.dlrm.Find(from[i]);
      break;
    case Map::kAbsl:
      for (int64_t i = 0; i < kBatch; ++i) sum += maps.absl.find(from[i])->second;
      break;
    default:
      for (int64_t i = 0; i < kBatch; ++i) sum += maps.std_map.find(from[i])->second;
  }
  return sum;
}

void Lookup(benchmark::State& state, Map map, std::shared_ptr<Lazy<Lookups>> from,
            std::shared_ptr<Lazy<Maps>> maps) {
  const std::vector<int64_t>& lookups = from->Get().ids;
  const Maps& m = maps->Get();
  std::vector<int64_t> rows(kBatch);
  int64_t next = (kNumLookups / state.threads()) * state.thread_index() / kBatch * kBatch;
  for (auto _ : state) {
    benchmark::DoNotOptimize(LookupBatch(m, map, lookups.data() + next, rows.data()));
    next = (next + kBatch) % kNumLookups;
  }
  state.SetItemsProcessed(state.iterations() * kBatch);
}

void Insert(benchmark::State& state, Map map, std::shared_ptr<Lazy<IdSet>> ids) {
  const std::vector<int64_t>& all = ids->Get().ids;
  for (auto _ : state) {
    state.PauseTiming();
    auto dlrm =
        map == Map::kDlrm ? std::make_unique<IdIndex>(static_cast<int64_t>(all.size())) : nullptr;
    absl::flat_hash_map<int64_t, int64_t> absl;
    std::unordered_map<int64_t, int64_t> std_map;
    if (map == Map::kAbsl) absl.reserve(all.size());
    if (map == Map::kStd) std_map.reserve(all.size());
    state.ResumeTiming();
    for (size_t i = 0; i < all.size(); ++i) {
      const auto row = static_cast<int64_t>(i);
      if (map == Map::kDlrm)
        dlrm->Insert(all[i]);
      else if (map == Map::kAbsl)
        absl.emplace(all[i], row);
      else
        std_map.emplace(all[i], row);
    }
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(all.size()));
}

}  // namespace

void RegisterIdIndexBenchmarks() {
  for (const int64_t n : {int64_t{1} << 20, int64_t{1} << 23}) {
    const std::string size = "/ids:" + std::to_string(n);
    auto ids = std::make_shared<Lazy<IdSet>>([n] { return MakeIds(n); });
    auto maps = std::make_shared<Lazy<Maps>>([ids] { return std::make_unique<Maps>(ids->Get()); });
    for (const bool zipf : {false, true}) {
      auto lookups =
          std::make_shared<Lazy<Lookups>>([ids, zipf] { return MakeLookups(ids->Get(), zipf); });
      for (const Map m : {Map::kDlrmBatch, Map::kDlrm, Map::kAbsl, Map::kStd}) {
        const std::string name = std::string("BM_IdLookup/map:") + NameOf(m) + size +
                                 (zipf ? "/dist:zipf" : "/dist:uniform");
        auto* b = benchmark::RegisterBenchmark(name.c_str(), Lookup, m, lookups, maps);
        b->UseRealTime()->Threads(1);
        if (MaxThreads() > 1) b->Threads(MaxThreads());
      }
    }
    for (const Map m : {Map::kDlrm, Map::kAbsl, Map::kStd}) {
      const std::string name = std::string("BM_IdInsert/map:") + NameOf(m) + size;
      benchmark::RegisterBenchmark(name.c_str(), Insert, m, ids)->UseRealTime();
    }
  }
}

}  // namespace dlrm::bench

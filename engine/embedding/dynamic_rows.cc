#include "engine/embedding/dynamic_rows.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>
#include <utility>

#include "engine/config/config.h"
#include "engine/core/philox.h"
#include "engine/core/radix_sort.h"
#include "engine/core/status.h"

namespace dlrm {
namespace {

constexpr int kSketchDepth = 4;
// Odd constants, one per sketch row: the row's hash is Mix(id * constant).
constexpr uint64_t kSketchSalt[kSketchDepth] = {0x9E3779B97F4A7C15ULL, 0xC2B2AE3D27D4EB4FULL,
                                                0x165667B19E3779F9ULL, 0xD6E8FEB86659FD93ULL};

void CheckOptions(const DynamicRowsOptions& o) {
  if (o.capacity < 1 || o.capacity > IdIndex::kMaxCapacity)
    ThrowInvalid("dynamic table capacity must be in [1, 2^40], got ", o.capacity);
  if (o.eviction == DynamicRowsOptions::Eviction::kTtl && o.ttl_steps < 1)
    ThrowInvalid("dynamic table ttl_steps must be >= 1 for TTL eviction, got ", o.ttl_steps);
  if (o.min_count < 1) ThrowInvalid("dynamic table min_count must be >= 1, got ", o.min_count);
  const int64_t w = o.sketch_width;
  if (o.min_count > 1 && (w < 64 || w > (int64_t{1} << 30) || (w & (w - 1)) != 0))
    ThrowInvalid("dynamic table sketch_width must be a power of two in [64, 2^30], got ", w);
  if (!(o.admit_probability > 0 && o.admit_probability <= 1))
    ThrowInvalid("dynamic table admit_probability must be in (0, 1], got ", o.admit_probability);
}

}  // namespace

DynamicRowsOptions DynamicRowsOptionsFor(const config::TableConfig& table, uint64_t seed,
                                         int32_t table_index) {
  const config::DynamicTableConfig& d = table.dynamic();
  DynamicRowsOptions o;
  const bool default_row = d.unadmitted() == config::DynamicTableConfig::DEFAULT_ROW;
  o.capacity = table.num_rows() - (default_row ? 1 : 0);
  switch (d.eviction()) {
    case config::DynamicTableConfig::LRU: o.eviction = DynamicRowsOptions::Eviction::kLru; break;
    case config::DynamicTableConfig::LFU: o.eviction = DynamicRowsOptions::Eviction::kLfu; break;
    case config::DynamicTableConfig::TTL: o.eviction = DynamicRowsOptions::Eviction::kTtl; break;
  }
  o.ttl_steps = d.ttl_steps();
  o.min_count = d.min_count();
  o.sketch_width = d.sketch_width();
  o.admit_probability = d.admit_probability();
  // One key per (seed, table): the golden-ratio multiple spreads the stream over the key.
  o.admission_key =
      seed ^ ((kStreamAdmission + static_cast<uint64_t>(table_index)) * 0x9E3779B97F4A7C15ULL);
  return o;
}

DynamicRowsOptions SsdCacheOptionsFor(int64_t cache_rows) {
  DynamicRowsOptions o;
  o.capacity = cache_rows;
  return o;
}

int64_t SsdCacheBytes(const config::DlrmConfig& config, int table_index, int64_t rows) {
  return rows * RowBytes(config, config.model().tables(table_index)) +
         static_cast<int64_t>(DynamicRows::MemoryBytesFor(SsdCacheOptionsFor(rows)));
}

int64_t StateRows(const config::DlrmConfig& config, int table_index) {
  return IsQuantized(config.model().tables(table_index).precision())
             ? 0
             : ResidentRows(config, table_index);
}

int64_t ResidentRows(const config::DlrmConfig& config, int table_index) {
  const config::TableConfig& table = config.model().tables(table_index);
  if (!table.has_ssd()) return table.num_rows();
  const int64_t budget = table.ssd().cache_bytes();
  // SsdCacheBytes grows with rows (the index in steps of powers of two).
  auto bytes = [&](int64_t rows) { return SsdCacheBytes(config, table_index, rows); };
  int64_t lo = 1, hi = std::min(table.num_rows(), budget / RowBytes(config, table));
  while (lo < hi) {  // the most rows whose bytes fit the budget
    const int64_t mid = lo + (hi - lo + 1) / 2;
    if (bytes(mid) <= budget)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

DynamicRows::DynamicRows(const DynamicRowsOptions& options)
    : options_((CheckOptions(options), options)), index_(options.capacity) {
  const auto rows = static_cast<size_t>(options.capacity);
  last_step_.assign(rows, 0);
  count_.assign(rows, 0);
  id_of_row_.assign(rows, 0);
  prev_.assign(rows + 1, Head());
  next_.assign(rows + 1, Head());
  if (options.min_count > 1)
    sketch_.assign(static_cast<size_t>(kSketchDepth * options.sketch_width), 0);
}

size_t DynamicRows::MemoryBytesFor(const DynamicRowsOptions& o) {
  const size_t sketch = o.min_count > 1 ? kSketchDepth * static_cast<size_t>(o.sketch_width) : 0;
  constexpr size_t kPerRow = 5;  // last step, count, id, prev, next
  return IdIndex::MemoryBytesFor(o.capacity) + sketch * sizeof(uint32_t) +
         (kPerRow * static_cast<size_t>(o.capacity) + 2) * sizeof(int64_t);
}

size_t DynamicRows::memory_bytes() const {
  return index_.memory_bytes() + sketch_.capacity() * sizeof(uint32_t) +
         (last_step_.capacity() + count_.capacity() + id_of_row_.capacity() + prev_.capacity() +
          next_.capacity()) *
             sizeof(int64_t);
}

void DynamicRowsUndo::Clear() {
  touched.clear();
  evicted.clear();
  admitted.clear();
  sketch.clear();
}

void DynamicRows::Resolve(const int64_t* ids, int64_t n, int64_t step, int64_t* rows,
                          RowChanges* changes, DynamicRowsUndo* undo) {
  if (step < 0 || step < last_resolved_step_)
    ThrowInvalid("dynamic table: step ", step, " is before the last step resolved, ",
                 last_resolved_step_);
  if (n < 0) ThrowInvalid("dynamic table: ", n, " ids to resolve");
  undo_ = undo;
  if (undo_ != nullptr) {
    undo_->Clear();
    undo_->last_resolved_step = last_resolved_step_;
    undo_->stats = stats_;
  }
  last_resolved_step_ = step;
  changes->evicted.clear();
  changes->admitted.clear();
  Distinguish(ids, n);
  TouchAndCount(step);
  if (options_.eviction == DynamicRowsOptions::Eviction::kTtl) ExpireTtl(step, changes);
  const int64_t free_rows = index_.capacity() - index_.size();
  const auto wanted = static_cast<int64_t>(to_admit_.size());
  if (wanted > free_rows) EvictForSpace(wanted - free_rows, step, changes);
  Admit(step, changes);
  undo_ = nullptr;
  index_.FindBatch(ids, n, rows);
  stats_.lookups += n;
}

void DynamicRows::Undo(const DynamicRowsUndo& undo) {
  for (auto a = undo.admitted.rbegin(); a != undo.admitted.rend(); ++a) {
    Unlink(a->row);
    index_.UndoInsert(a->id, a->row, a->from_unused);
  }
  const auto put_back = [this](const DynamicRowsUndo::Moved& m) {
    const auto u = static_cast<size_t>(m.row);
    last_step_[u] = m.last_step;
    count_[u] = m.count;
    id_of_row_[u] = m.id;
    InsertAfter(m.prev, m.row);
  };
  for (auto e = undo.evicted.rbegin(); e != undo.evicted.rend(); ++e) {
    index_.UndoErase(e->id, e->row);
    put_back(*e);
  }
  for (auto t = undo.touched.rbegin(); t != undo.touched.rend(); ++t) {
    Unlink(t->row);
    put_back(*t);
  }
  for (auto s = undo.sketch.rbegin(); s != undo.sketch.rend(); ++s) sketch_[s->first] = s->second;
  last_resolved_step_ = undo.last_resolved_step;
  stats_ = undo.stats;
}

// distinct_ = the step's (id, occurrences), ascending id.
void DynamicRows::Distinguish(const int64_t* ids, int64_t n) {
  sorted_.assign(ids, ids + n);
  scratch_.resize(sorted_.size());
  RadixSort(sorted_.data(), scratch_.data(), n, 64, [](int64_t id) { return SignedKey(id); });
  distinct_.clear();
  for (size_t i = 0; i < sorted_.size();) {
    size_t j = i + 1;
    while (j < sorted_.size() && sorted_[j] == sorted_[i]) ++j;
    distinct_.emplace_back(sorted_[i], static_cast<int64_t>(j - i));
    i = j;
  }
}

void DynamicRows::TouchAndCount(int64_t step) {
  to_admit_.clear();
  // The rows first, in one pipelined pass; then each hit's metadata and its LRU
  // neighbours are prefetched a few ids ahead (each is a miss in arrays of capacity rows).
  // The order of the updates is unchanged: ascending id.
  const auto n = static_cast<int64_t>(distinct_.size());
  found_.resize(distinct_.size());
  sorted_.resize(distinct_.size());  // reused as the ids, contiguous for FindBatch
  for (size_t i = 0; i < distinct_.size(); ++i) sorted_[i] = distinct_[i].first;
  index_.FindBatch(sorted_.data(), n, found_.data());
  constexpr int64_t kAhead = 8, kNeighboursAhead = 4;
  for (int64_t i = 0; i < n; ++i) {
    if (i + kAhead < n && found_[static_cast<size_t>(i + kAhead)] != kNoRow)
      PrefetchRow(found_[static_cast<size_t>(i + kAhead)]);
    if (i + kNeighboursAhead < n && found_[static_cast<size_t>(i + kNeighboursAhead)] != kNoRow)
      PrefetchNeighbours(found_[static_cast<size_t>(i + kNeighboursAhead)]);
    const auto [id, occurrences] = distinct_[static_cast<size_t>(i)];
    const int64_t row = found_[static_cast<size_t>(i)];
    if (row != kNoRow) {
      const auto u = static_cast<size_t>(row);
      if (undo_ != nullptr) undo_->touched.push_back({id, row, last_step_[u], count_[u], prev_[u]});
      stats_.hits += occurrences;
      last_step_[u] = step;
      count_[u] += occurrences;
      Unlink(row);
      Append(row);
    } else if (Qualifies(id, occurrences, step)) {
      to_admit_.emplace_back(id, occurrences);
    }
  }
}

void DynamicRows::PrefetchRow(int64_t row) const {
  const auto u = static_cast<size_t>(row);
  __builtin_prefetch(&last_step_[u], 1);
  __builtin_prefetch(&count_[u], 1);
  __builtin_prefetch(&prev_[u], 1);
  __builtin_prefetch(&next_[u], 1);
}

void DynamicRows::PrefetchNeighbours(int64_t row) const {
  const auto u = static_cast<size_t>(row);
  __builtin_prefetch(&next_[static_cast<size_t>(prev_[u])], 1);
  __builtin_prefetch(&prev_[static_cast<size_t>(next_[u])], 1);
}

bool DynamicRows::Qualifies(int64_t id, int64_t occurrences, int64_t step) {
  if (options_.min_count > 1 && CountInSketch(id, occurrences) < options_.min_count) return false;
  if (options_.admit_probability >= 1) return true;
  const auto words =
      Philox4x32(options_.admission_key, static_cast<uint64_t>(id), static_cast<uint64_t>(step));
  const double miss_all =
      std::pow(1.0 - options_.admit_probability, static_cast<double>(occurrences));
  return UnitFromBits(words[0]) < 1.0 - miss_all;
}

int64_t DynamicRows::CountInSketch(int64_t id, int64_t occurrences) {
  const auto width = static_cast<uint64_t>(options_.sketch_width);
  const auto add = static_cast<uint64_t>(occurrences);
  uint64_t estimate = std::numeric_limits<uint64_t>::max();
  for (int d = 0; d < kSketchDepth; ++d) {
    const uint64_t hash =
        id_index_detail::Mix(static_cast<int64_t>(static_cast<uint64_t>(id) * kSketchSalt[d]));
    const size_t at = d * width + (hash & (width - 1));
    uint32_t& counter = sketch_[at];
    if (undo_ != nullptr) undo_->sketch.emplace_back(at, counter);
    counter = static_cast<uint32_t>(std::min<uint64_t>(counter + add, UINT32_MAX));
    estimate = std::min<uint64_t>(estimate, counter);
  }
  return static_cast<int64_t>(estimate);
}

// Rows untouched for more than ttl_steps sit at the LRU order's old end.
void DynamicRows::ExpireTtl(int64_t step, RowChanges* changes) {
  while (next_[Head()] != Head()) {
    const int64_t row = next_[Head()];
    if (step - last_step_[static_cast<size_t>(row)] <= options_.ttl_steps) break;
    Evict(row, changes);
  }
}

void DynamicRows::EvictForSpace(int64_t needed, int64_t step, RowChanges* changes) {
  if (options_.eviction == DynamicRowsOptions::Eviction::kLfu)
    return EvictLfu(needed, step, changes);
  for (; needed > 0 && next_[Head()] != Head(); --needed) {
    const int64_t row = next_[Head()];
    if (last_step_[static_cast<size_t>(row)] == step) break;  // the rest are this step's
    Evict(row, changes);
  }
}

void DynamicRows::EvictLfu(int64_t needed, int64_t step, RowChanges* changes) {
  std::vector<std::tuple<int64_t, int64_t, int64_t, int64_t>> candidates;  // count, last, id, row
  for (int64_t r = next_[Head()]; r != Head(); r = next_[static_cast<size_t>(r)]) {
    const auto u = static_cast<size_t>(r);
    if (last_step_[u] != step) candidates.emplace_back(count_[u], last_step_[u], id_of_row_[u], r);
  }
  const auto take = static_cast<size_t>(std::min<int64_t>(std::max(needed, index_.capacity() / 64),
                                                          static_cast<int64_t>(candidates.size())));
  std::nth_element(candidates.begin(), candidates.begin() + static_cast<std::ptrdiff_t>(take),
                   candidates.end());
  std::sort(candidates.begin(), candidates.begin() + static_cast<std::ptrdiff_t>(take));
  for (size_t i = 0; i < take; ++i) Evict(std::get<3>(candidates[i]), changes);
}

void DynamicRows::Evict(int64_t row, RowChanges* changes) {
  const auto u = static_cast<size_t>(row);
  const int64_t id = id_of_row_[u];
  if (undo_ != nullptr) undo_->evicted.push_back({id, row, last_step_[u], count_[u], prev_[u]});
  index_.Erase(id);
  Unlink(row);
  changes->evicted.emplace_back(id, row);
  ++stats_.evicted;
}

void DynamicRows::Admit(int64_t step, RowChanges* changes) {
  for (const auto& [id, occurrences] : to_admit_) {
    if (index_.size() == index_.capacity()) {
      ++stats_.rejected;
      continue;
    }
    const bool from_unused = index_.freed_rows().empty();
    const int64_t row = index_.Insert(id);
    if (undo_ != nullptr) undo_->admitted.push_back({id, row, from_unused});
    const auto u = static_cast<size_t>(row);
    last_step_[u] = step;
    count_[u] = occurrences;
    id_of_row_[u] = id;
    Append(row);
    changes->admitted.emplace_back(id, row);
    ++stats_.admitted;
  }
}

DynamicRowsSnapshot DynamicRows::Snapshot() const {
  DynamicRowsSnapshot s;
  ForEachByRecency([&](int64_t id, int64_t row) {
    s.ids.push_back(id);
    s.rows.push_back(row);
    s.last_steps.push_back(last_step(row));
    s.counts.push_back(count(row));
  });
  s.freed_rows = index_.freed_rows();
  s.next_unused_row = index_.next_unused_row();
  s.sketch = sketch_;
  s.last_resolved_step = last_resolved_step_;
  s.stats = stats_;
  return s;
}

void DynamicRows::CheckSnapshot(const DynamicRowsSnapshot& s) const {
  if (s.sketch.size() != sketch_.size())
    Throw(StatusCode::kDataLoss, "dynamic table state: a sketch of ", s.sketch.size(),
          " counters where the options make ", sketch_.size());
  if (s.last_steps.size() != s.ids.size() || s.counts.size() != s.ids.size())
    Throw(StatusCode::kDataLoss, "dynamic table state: ", s.ids.size(), " ids but ",
          s.last_steps.size(), " last steps and ", s.counts.size(), " counts");
  int64_t previous = 0;
  for (size_t i = 0; i < s.ids.size(); ++i) {
    if (s.counts[i] < 1 || s.last_steps[i] < previous || s.last_steps[i] > s.last_resolved_step)
      Throw(StatusCode::kDataLoss, "dynamic table state: id ", s.ids[i], " has count ", s.counts[i],
            " and last step ", s.last_steps[i], " (after ", previous,
            " in recency order; last step resolved ", s.last_resolved_step, ")");
    previous = s.last_steps[i];
  }
}

DynamicRowsSnapshot DynamicRows::ResidentSnapshot(const DynamicRowsOptions& options,
                                                  std::vector<int64_t> ids,
                                                  std::vector<int64_t> rows) {
  DLRM_INTERNAL_CHECK(ids.size() == rows.size());
  DynamicRowsSnapshot s;
  std::vector<bool> used;
  for (const int64_t row : rows) {
    if (row < 0 || row >= options.capacity)
      Throw(StatusCode::kDataLoss, "dynamic table state: row ", row, " is outside [0, ",
            options.capacity, ")");
    if (static_cast<size_t>(row) >= used.size()) used.resize(static_cast<size_t>(row) + 1);
    if (used[static_cast<size_t>(row)])
      Throw(StatusCode::kDataLoss, "dynamic table state: row ", row, " is given twice");
    used[static_cast<size_t>(row)] = true;
  }
  s.next_unused_row = static_cast<int64_t>(used.size());
  for (size_t row = used.size(); row-- > 0;)  // the lowest freed row is handed out first
    if (!used[row]) s.freed_rows.push_back(static_cast<int64_t>(row));
  s.last_steps.assign(ids.size(), 0);
  s.counts.assign(ids.size(), 1);
  if (options.min_count > 1)
    s.sketch.assign(kSketchDepth * static_cast<size_t>(options.sketch_width), 0);
  s.ids = std::move(ids);
  s.rows = std::move(rows);
  return s;
}

void DynamicRows::Restore(const DynamicRowsSnapshot& s) {
  CheckSnapshot(s);
  DynamicRows fresh(options_);
  fresh.index_.Restore(s.ids, s.rows, s.freed_rows, s.next_unused_row);
  for (size_t i = 0; i < s.ids.size(); ++i) {
    const auto row = static_cast<size_t>(s.rows[i]);
    fresh.last_step_[row] = s.last_steps[i];
    fresh.count_[row] = s.counts[i];
    fresh.id_of_row_[row] = s.ids[i];
    fresh.Append(s.rows[i]);
  }
  fresh.sketch_ = s.sketch;
  fresh.last_resolved_step_ = s.last_resolved_step;
  fresh.stats_ = s.stats;
  Swap(fresh);
}

void DynamicRows::Swap(DynamicRows& other) {
  std::swap(index_, other.index_);
  std::swap(stats_, other.stats_);
  last_step_.swap(other.last_step_);
  count_.swap(other.count_);
  id_of_row_.swap(other.id_of_row_);
  prev_.swap(other.prev_);
  next_.swap(other.next_);
  sketch_.swap(other.sketch_);
  std::swap(last_resolved_step_, other.last_resolved_step_);
}

void DynamicRows::Unlink(int64_t row) {
  const auto u = static_cast<size_t>(row);
  next_[static_cast<size_t>(prev_[u])] = next_[u];
  prev_[static_cast<size_t>(next_[u])] = prev_[u];
}

void DynamicRows::Append(int64_t row) { InsertAfter(prev_[static_cast<size_t>(Head())], row); }

void DynamicRows::InsertAfter(int64_t prev, int64_t row) {
  const auto u = static_cast<size_t>(row), p = static_cast<size_t>(prev);
  prev_[u] = prev;
  next_[u] = next_[p];
  prev_[static_cast<size_t>(next_[p])] = row;
  next_[p] = row;
}

}  // namespace dlrm

#include "engine/embedding/embedding_bag.h"

#include <algorithm>
#include <type_traits>
#include <utility>

#include "engine/core/cpu_features.h"
#include "engine/core/prefetch.h"
#include "engine/core/radix_sort.h"
#include "engine/core/status.h"
#include "engine/embedding/half_row.h"
#include "engine/embedding/pool_bag_avx2.h"
#include "engine/embedding/quantized_row.h"

namespace dlrm {
namespace {

// One id occurrence in the batch: the row it reads and its index in the batch's ids.
struct Touch {
  int64_t id;
  int64_t pos;
};

// Where the gradient of one id occurrence comes from: coef * d_pooled[base .. base + dim).
// coef folds the per-id weight and the MEAN scale (w * (1 / len), in that order).
template <typename T>
struct GradSource {
  int64_t base;
  T coef;
};

// Enough tasks per thread that a few hot ids (power-law batches) do not leave threads
// idle, few enough that the per-task scheduling cost stays small.
constexpr int64_t kTasksPerThread = 4;
// How many rows ahead of the one being summed (forward) or updated (backward) the next
// row is prefetched.
constexpr int64_t kPrefetchRows = 8;
// The most bytes of summed row gradients UpdateIsFinite keeps for ApplyUpdate; a batch
// touching more rows has them summed again (the same sums).
constexpr size_t kKeptGradBytes = size_t{256} << 20;

int KeyBits(int64_t num_rows) {
  const auto max_id = static_cast<uint64_t>(num_rows - 1);
  int bits = 0;
  while (bits < 64 && (max_id >> bits) != 0) ++bits;
  return bits;
}

// Row id of a table as T values the optimizer can read and update: the table's own
// (FP32), else the row widened into `widened` (BF16 / FP16; StoreRow narrows it back).
template <typename Table, typename T>
auto RowValues(Table& table, int64_t id, T* widened) -> decltype(table.row(id)) {
  if (!table.half()) return table.row(id);
  table.ReadRow(id, widened);
  return widened;
}

}  // namespace

std::vector<char> BoundTables(const std::vector<FeatureBinding>& features, size_t num_tables) {
  std::vector<char> bound(num_tables, 0);
  for (const FeatureBinding& f : features) {
    DLRM_INTERNAL_CHECK(f.table >= 0 && static_cast<size_t>(f.table) < num_tables);
    bound[static_cast<size_t>(f.table)] = 1;
  }
  return bound;
}

template <typename T>
EmbeddingBagCollection<T>::EmbeddingBagCollection(std::vector<EmbeddingTable<T>>* tables,
                                                  std::vector<FeatureBinding> features,
                                                  int32_t pooled_width)
    : tables_(tables), features_(std::move(features)), pooled_width_(pooled_width) {
  if (tables_ == nullptr) ThrowInvalid("EmbeddingBagCollection: tables is NULL");
  if (pooled_width_ < 0)
    ThrowInvalid("EmbeddingBagCollection: pooled_width must be >= 0, got ", pooled_width_);
  const auto num_tables = static_cast<int32_t>(tables_->size());
  for (size_t f = 0; f < features_.size(); ++f) {
    const FeatureBinding& fb = features_[f];
    if (fb.table < 0 || fb.table >= num_tables)
      ThrowInvalid("EmbeddingBagCollection: feature ", f, " binds table ", fb.table,
                   " but there are ", num_tables, " tables");
    const int32_t dim = (*tables_)[fb.table].dim();
    if (fb.offset < 0 || static_cast<int64_t>(fb.offset) + dim > pooled_width_)
      ThrowInvalid("EmbeddingBagCollection: feature ", f, " columns [", fb.offset, ", ",
                   static_cast<int64_t>(fb.offset) + dim, ") do not fit pooled_width ",
                   pooled_width_);
  }
  // Whether the features' columns cover [0, pooled_width) once each (every model's do).
  std::vector<std::pair<int64_t, int64_t>> spans;
  for (const FeatureBinding& fb : features_)
    spans.push_back({fb.offset, fb.offset + (*tables_)[fb.table].dim()});
  std::sort(spans.begin(), spans.end());
  int64_t covered = 0;
  for (const auto& [begin, end] : spans) covered = begin == covered ? end : -1;
  features_tile_row_ = covered == pooled_width_;
}

template <typename T>
void EmbeddingBagCollection<T>::ForwardBatch(const ValidatedBatch& batch, T* pooled,
                                             ThreadPool* pool) const {
  constexpr int64_t kRows = 256;  // samples per task
  const int64_t n = batch.view.batch_size;
  ParallelFor(pool, (n + kRows - 1) / kRows, [&](int64_t c) {
    const int64_t b0 = c * kRows, b1 = std::min(n, b0 + kRows);
    Forward(batch, b0, b1, pooled + b0 * pooled_width_);
  });
}

template <typename T>
void EmbeddingBagCollection<T>::Forward(const ValidatedBatch& batch, int64_t b0, int64_t b1,
                                        T* pooled, std::vector<const void*>* scratch) const {
  const BatchView& view = batch.view;
  DLRM_INTERNAL_CHECK(view.num_sparse == num_features());
  DLRM_INTERNAL_CHECK(batch.offsets.size() ==
                      static_cast<size_t>(num_features()) * view.batch_size + 1);
  DLRM_INTERNAL_CHECK(0 <= b0 && b0 <= b1 && b1 <= view.batch_size);
  // Two passes: the rows in the order they are summed, then the sums, asking for the row
  // kPrefetchRows ahead while one is added. Rows of large tables are cache (and TLB)
  // misses at random addresses; a steady distance keeps a few in flight without
  // flooding the core's miss buffers as a whole sample's worth would.
  std::vector<const void*> local;
  std::vector<const void*>& rows = scratch ? *scratch : local;
  rows.clear();
  for (int64_t b = b0; b < b1; ++b) {
    for (int32_t f = 0; f < num_features(); ++f) {
      const EmbeddingTable<T>& table = (*tables_)[features_[f].table];
      for (int64_t i = batch.bag_begin(f, b), end = batch.bag_end(f, b); i < end; ++i)
        rows.push_back(table.row_address(view.ids[i]));
    }
  }
  size_t next = 0;  // rows[next]: the next row to add
  for (int64_t b = b0; b < b1; ++b) {
    T* out_row = pooled + (b - b0) * pooled_width_;
    // With tiling features each bag zeroes (portable loop) or stores (AVX2) its own columns,
    // so the row is written once rather than zeroed first.
    if (!features_tile_row_) std::fill(out_row, out_row + pooled_width_, T(0));
    for (int32_t f = 0; f < num_features(); ++f)
      next = PoolBag(batch, f, b, rows, next, out_row + features_[f].offset);
  }
}

template <typename T>
size_t EmbeddingBagCollection<T>::PoolBag(const ValidatedBatch& batch, int32_t f, int64_t b,
                                          const std::vector<const void*>& rows, size_t next,
                                          T* out) const {
  const FeatureBinding& fb = features_[f];
  const EmbeddingTable<T>& table = (*tables_)[fb.table];
  const int64_t begin = batch.bag_begin(f, b), count = batch.bag_end(f, b) - begin;
  const float* weights = batch.view.weights ? batch.view.weights + begin : nullptr;
  const void* const* bag = rows.data() + next;
  const auto available = static_cast<int64_t>(rows.size() - next);
  if (table.quantized())
    PoolQuantizedBag(bag, count, available, weights, fb.mean, table.dim(), table.precision(), out);
  else if (table.half())
    PoolHalfBag(bag, count, available, weights, fb.mean, table.dim(), table.precision(), out);
  else
    PoolFloatRows(bag, count, available, weights, fb.mean, table.dim(), out);
  return next + static_cast<size_t>(count);
}

template <typename T>
void EmbeddingBagCollection<T>::PoolFloatRows(const void* const* rows, int64_t count,
                                              int64_t available, const float* weights, bool mean,
                                              int32_t dim, T* out) const {
  if constexpr (std::is_same_v<T, float>) {
    if (dim % 8 == 0 && CpuHasAvx2Fma())
      return PoolBagAvx2(rows, count, weights, mean, dim, out, available, kPrefetchRows);
  }
  if (features_tile_row_) std::fill(out, out + dim, T(0));
  for (int64_t j = 0; j < count; ++j) {
    if (j + kPrefetchRows < available)
      PrefetchLines(rows[j + kPrefetchRows], sizeof(T) * static_cast<size_t>(dim));
    const T* row = static_cast<const T*>(rows[j]);
    if (weights) {
      const auto w = static_cast<T>(weights[j]);
      for (int32_t k = 0; k < dim; ++k) out[k] += w * row[k];
    } else {
      for (int32_t k = 0; k < dim; ++k) out[k] += row[k];
    }
  }
  if (mean && count > 0) {
    const auto len = static_cast<T>(count);
    for (int32_t k = 0; k < dim; ++k) out[k] /= len;
  }
}

template <typename T>
struct EmbeddingBagCollection<T>::Workspace {
  std::vector<GradSource<T>> sources;           // per id occurrence
  std::vector<Touch> touches, scratch;          // per id occurrence, grouped by table
  std::vector<int64_t> table_begin, table_end;  // a table's touches: [begin, end)
  // Per table, the start of each run of one id in touches (filled by one task per table),
  // then concatenated into segment_begin / segment_end / segment_table.
  std::vector<std::vector<int64_t>> table_segments;
  std::vector<int64_t> segment_begin, segment_end;
  std::vector<int32_t> segment_table;
  int32_t max_dim = 0;  // of the tables with a segment
  // Segment s's summed gradient is kept_grads[grad_begin[s] .. grad_begin[s + 1]) when
  // grads_kept (UpdateIsFinite kept them for the ApplyUpdate after it).
  std::vector<int64_t> grad_begin;
  std::vector<T> kept_grads;
  bool grads_kept = false;
};

template <typename T>
EmbeddingBagCollection<T>::~EmbeddingBagCollection() = default;

template <typename T>
void EmbeddingBagCollection<T>::BackwardAndUpdate(const ValidatedBatch& batch, const T* d_pooled,
                                                  SparseOptimizer<T>& optimizer, float lr,
                                                  int64_t step, ThreadPool* pool,
                                                  const std::vector<RowRange>* row_ranges) {
  Segment(batch, pool, row_ranges);
  ApplyUpdate(d_pooled, optimizer, lr, step, pool);
}

template <typename T>
bool EmbeddingBagCollection<T>::UpdateIsFinite(const ValidatedBatch& batch, const T* d_pooled,
                                               const SparseOptimizer<T>& optimizer, float lr,
                                               int64_t step, ThreadPool* pool,
                                               const std::vector<RowRange>* row_ranges) {
  Segment(batch, pool, row_ranges);
  Workspace& ws = *workspace_;
  const auto num_segments = static_cast<int64_t>(ws.segment_table.size());
  // The sums are kept for ApplyUpdate where they fit kKeptGradBytes, else summed again.
  const int64_t kept = ws.grad_begin.empty() ? 0 : ws.grad_begin.back();
  ws.grads_kept = static_cast<size_t>(kept) * sizeof(T) <= kKeptGradBytes;
  if (ws.grads_kept) ws.kept_grads.resize(static_cast<size_t>(kept));
  const bool has_state = optimizer.HasRowState();
  const int64_t parts = SegmentParts(num_segments, pool);
  std::vector<char> finite(static_cast<size_t>(parts), 1);
  ParallelFor(pool, parts, [&](int64_t p) {
    std::vector<T> scratch(ws.grads_kept ? 0 : static_cast<size_t>(ws.max_dim));
    std::vector<T> widened(static_cast<size_t>(ws.max_dim));
    const int64_t s1 = SplitBegin(num_segments, parts, p + 1);
    for (int64_t s = SplitBegin(num_segments, parts, p); s < s1; ++s) {
      if (s + kPrefetchRows < s1) PrefetchSegment(s + kPrefetchRows, optimizer, has_state);
      const int32_t t = ws.segment_table[s];
      const EmbeddingTable<T>& table = (*tables_)[t];
      T* grad = ws.grads_kept ? ws.kept_grads.data() + ws.grad_begin[s] : scratch.data();
      const int64_t id = SumRowGradient(s, d_pooled, grad);
      const T* weights = RowValues(table, id, widened.data());
      if (!optimizer.RowUpdateIsFinite(t, id, weights, grad, table.dim(), lr, step)) {
        finite[static_cast<size_t>(p)] = 0;
        return;
      }
    }
  });
  const bool all = std::all_of(finite.begin(), finite.end(), [](char f) { return f != 0; });
  ws.grads_kept = ws.grads_kept && all;  // a task that stopped early kept only some
  return all;
}

// Asks for segment s's row and its optimizer state ahead of their use.
template <typename T>
void EmbeddingBagCollection<T>::PrefetchSegment(int64_t s, const SparseOptimizer<T>& optimizer,
                                                bool has_state) const {
  const Workspace& ws = *workspace_;
  const int32_t table = ws.segment_table[s];
  const int64_t id = ws.touches[ws.segment_begin[s]].id;
  const EmbeddingTable<T>& rows = (*tables_)[table];
  const size_t value_bytes = rows.half() ? sizeof(uint16_t) : sizeof(T);
  PrefetchLines(rows.row_address(id), value_bytes * static_cast<size_t>(rows.dim()));
  if (has_state) optimizer.PrefetchState(table, id);
}

template <typename T>
int64_t EmbeddingBagCollection<T>::SegmentParts(int64_t num_segments, ThreadPool* pool) {
  const int64_t parts =
      pool ? std::min<int64_t>(num_segments, pool->num_threads() * kTasksPerThread) : 1;
  return std::max<int64_t>(parts, 1);
}

template <typename T>
int64_t EmbeddingBagCollection<T>::SumRowGradient(int64_t s, const T* d_pooled, T* grad) const {
  const Workspace& ws = *workspace_;
  const int32_t table = ws.segment_table[s];
  const int32_t dim = (*tables_)[table].dim();
  // The table's occurrences run on past this segment into its next ones: their sources
  // (random in the batch) are asked for two distances ahead, their slices of d_pooled one.
  const int64_t table_end = ws.table_end[table];
  const auto slice_bytes = static_cast<size_t>(dim) * sizeof(T);
  std::fill(grad, grad + dim, T(0));
  for (int64_t j = ws.segment_begin[s]; j < ws.segment_end[s]; ++j) {
    if (j + 2 * kPrefetchRows < table_end)
      __builtin_prefetch(&ws.sources[ws.touches[j + 2 * kPrefetchRows].pos]);
    if (j + kPrefetchRows < table_end)
      PrefetchLines(d_pooled + ws.sources[ws.touches[j + kPrefetchRows].pos].base, slice_bytes);
    const GradSource<T>& src = ws.sources[ws.touches[j].pos];
    const T* d = d_pooled + src.base;
    for (int32_t k = 0; k < dim; ++k) grad[k] += src.coef * d[k];
  }
  return ws.touches[ws.segment_begin[s]].id;
}

// Every id occurrence of the batch keyed to its table's row and source in d_pooled, and
// the touched rows' runs (segments) listed, in the workspace.
// Determinism: this phase and every later one (row sums, the finite check, the update)
// gives each task its own features, tables or rows, and each row's sum runs over its
// occurrences in batch order, so no result depends on the thread count.
template <typename T>
void EmbeddingBagCollection<T>::Segment(const ValidatedBatch& batch, ThreadPool* pool,
                                        const std::vector<RowRange>* row_ranges) {
  const BatchView& view = batch.view;
  DLRM_INTERNAL_CHECK(view.num_sparse == num_features());
  DLRM_INTERNAL_CHECK(batch.offsets.size() ==
                      static_cast<size_t>(num_features()) * view.batch_size + 1);
  const auto num_tables = static_cast<int32_t>(tables_->size());
  DLRM_INTERNAL_CHECK(row_ranges == nullptr ||
                      row_ranges->size() == static_cast<size_t>(num_tables));
  for (const EmbeddingTable<T>& table : *tables_)  // read-only: the Engine refuses to train
    DLRM_INTERNAL_CHECK(!table.quantized());
  if (!workspace_) workspace_ = std::make_unique<Workspace>();
  Workspace& ws = *workspace_;
  ws.segment_table.clear();
  ws.grad_begin.assign(1, 0);
  ws.grads_kept = false;
  if (view.num_ids == 0) return;
  SourcesOf(batch, pool);
  GroupByRow(batch, pool, row_ranges);
  ListSegments();
}

// ws.sources: per id occurrence, the slice of d_pooled and the factor its gradient is
// made of.
template <typename T>
void EmbeddingBagCollection<T>::SourcesOf(const ValidatedBatch& batch, ThreadPool* pool) {
  const BatchView& view = batch.view;
  const int64_t B = view.batch_size;
  Workspace& ws = *workspace_;
  ws.sources.resize(static_cast<size_t>(view.num_ids));
  ParallelFor(pool, num_features(), [&](int64_t f) {
    const FeatureBinding& fb = features_[f];
    for (int64_t b = 0; b < B; ++b) {
      const int64_t begin = batch.bag_begin(f, b), end = batch.bag_end(f, b);
      if (begin == end) continue;
      const T scale = fb.mean ? T(1) / static_cast<T>(end - begin) : T(1);
      const int64_t base = b * pooled_width_ + fb.offset;
      for (int64_t i = begin; i < end; ++i) {
        const T w = view.weights ? static_cast<T>(view.weights[i]) : T(1);
        ws.sources[i] = {base, w * scale};
      }
    }
  });
}

template <typename T>
void EmbeddingBagCollection<T>::GroupByRow(const ValidatedBatch& batch, ThreadPool* pool,
                                           const std::vector<RowRange>* row_ranges) {
  const BatchView& view = batch.view;
  const auto num_tables = static_cast<int32_t>(tables_->size());
  const int64_t num_ids = view.num_ids;
  Workspace& ws = *workspace_;
  // Occurrences grouped by table; within a table, features in index order, so each
  // group starts out in position order (features are stored feature-major). Sorting each
  // group stably by id yields (id, position) order; each run of one id is a segment whose
  // gradient is summed in that order and applied once.
  ws.table_begin.assign(num_tables + 1, 0);
  for (int32_t f = 0; f < num_features(); ++f)
    ws.table_begin[features_[f].table + 1] += batch.bag_begin(f + 1, 0) - batch.bag_begin(f, 0);
  for (int32_t t = 0; t < num_tables; ++t) ws.table_begin[t + 1] += ws.table_begin[t];
  ws.touches.resize(static_cast<size_t>(num_ids));
  ws.scratch.resize(static_cast<size_t>(num_ids));
  ws.table_segments.resize(num_tables);
  ws.table_end.assign(num_tables, 0);
  ParallelFor(pool, num_tables, [&](int64_t t) {
    const int64_t begin = ws.table_begin[t], end = ws.table_begin[t + 1];
    std::vector<int64_t>& segments = ws.table_segments[t];
    segments.clear();
    if (begin == end) return;
    int64_t next = begin;
    const RowRange rows = row_ranges ? (*row_ranges)[t] : RowRange{0, (*tables_)[t].num_rows()};
    for (int32_t f = 0; f < num_features(); ++f) {
      if (features_[f].table != t) continue;
      for (int64_t i = batch.bag_begin(f, 0); i < batch.bag_begin(f + 1, 0); ++i) {
        const int64_t id = view.ids[i];
        if (id >= rows.begin && id < rows.end) ws.touches[next++] = {id - rows.begin, i};
      }
    }
    // Only [begin, next) holds touches of this table's rows (fewer for a shard).
    ws.table_end[t] = next;
    // Stable: equal ids stay in position order, which makes the gradient sums
    // deterministic.
    RadixSort(ws.touches.data() + begin, ws.scratch.data() + begin, next - begin,
              KeyBits((*tables_)[t].num_rows()),
              [](const Touch& touch) { return static_cast<uint64_t>(touch.id); });
    for (int64_t j = begin; j < next; ++j) {
      if (j == begin || ws.touches[j].id != ws.touches[j - 1].id) segments.push_back(j);
    }
  });
}

// ws.segment_*: the segments of every table, concatenated in table order.
template <typename T>
void EmbeddingBagCollection<T>::ListSegments() {
  const auto num_tables = static_cast<int32_t>(tables_->size());
  Workspace& ws = *workspace_;
  ws.segment_begin.clear();
  ws.segment_end.clear();
  ws.segment_table.clear();
  ws.max_dim = 0;
  for (int32_t t = 0; t < num_tables; ++t) {
    const std::vector<int64_t>& segments = ws.table_segments[t];
    ws.segment_begin.insert(ws.segment_begin.end(), segments.begin(), segments.end());
    // A segment ends where the next one of its table begins, the last at the table's end.
    if (!segments.empty()) {
      ws.segment_end.insert(ws.segment_end.end(), segments.begin() + 1, segments.end());
      ws.segment_end.push_back(ws.table_end[t]);
    }
    ws.segment_table.insert(ws.segment_table.end(), segments.size(), t);
    if (!segments.empty()) ws.max_dim = std::max(ws.max_dim, (*tables_)[t].dim());
  }
  ws.grad_begin.resize(ws.segment_table.size() + 1);
  ws.grad_begin[0] = 0;
  for (size_t s = 0; s < ws.segment_table.size(); ++s)
    ws.grad_begin[s + 1] = ws.grad_begin[s] + (*tables_)[ws.segment_table[s]].dim();
}

// Each segment is reduced whole by one task and its row updated once.
template <typename T>
void EmbeddingBagCollection<T>::ApplyUpdate(const T* d_pooled, SparseOptimizer<T>& optimizer,
                                            float lr, int64_t step, ThreadPool* pool) {
  const Workspace& ws = *workspace_;
  const auto num_segments = static_cast<int64_t>(ws.segment_table.size());
  if (num_segments == 0) return;
  // Asked once: a stateless optimizer (SGD) is spared a virtual call per row.
  const bool has_state = optimizer.HasRowState();
  auto update_segments = [&](int64_t s0, int64_t s1) {
    std::vector<T> scratch(ws.grads_kept ? 0 : static_cast<size_t>(ws.max_dim));
    std::vector<T> widened(static_cast<size_t>(ws.max_dim));
    for (int64_t s = s0; s < s1; ++s) {
      if (s + kPrefetchRows < s1) PrefetchSegment(s + kPrefetchRows, optimizer, has_state);
      const int32_t t = ws.segment_table[s];
      EmbeddingTable<T>& table = (*tables_)[t];
      const T* grad = ws.grads_kept ? ws.kept_grads.data() + ws.grad_begin[s] : scratch.data();
      const int64_t id = ws.grads_kept ? ws.touches[ws.segment_begin[s]].id
                                       : SumRowGradient(s, d_pooled, scratch.data());
      T* weights = RowValues(table, id, widened.data());
      optimizer.UpdateRow(t, id, weights, grad, table.dim(), lr, step);
      if (table.half()) table.StoreRow(id, weights, step);
    }
  };
  ParallelForRanges(pool, num_segments, SegmentParts(num_segments, pool), update_segments);
  workspace_->grads_kept = false;  // used once
}

template class EmbeddingBagCollection<float>;
template class EmbeddingBagCollection<double>;

}  // namespace dlrm

#include "engine/embedding/embedding_bag.h"

#include <algorithm>
#include <array>
#include <utility>

#include "engine/core/status.h"

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

int KeyBits(int64_t num_rows) {
  const auto max_id = static_cast<uint64_t>(num_rows - 1);
  int bits = 0;
  while (bits < 64 && (max_id >> bits) != 0) ++bits;
  return bits;
}

// Stable LSD radix sort by id, ids in [0, 2^key_bits). Stability keeps equal ids in
// position order, which is what makes the gradient sums deterministic. scratch holds n.
void SortById(Touch* data, Touch* scratch, int64_t n, int key_bits) {
  constexpr int kDigitBits = 8;
  constexpr size_t kBuckets = size_t{1} << kDigitBits;
  Touch* src = data;
  Touch* dst = scratch;
  for (int shift = 0; shift < key_bits; shift += kDigitBits) {
    std::array<int64_t, kBuckets + 1> start{};
    for (int64_t i = 0; i < n; ++i) {
      const auto digit = (static_cast<uint64_t>(src[i].id) >> shift) & (kBuckets - 1);
      ++start[digit + 1];
    }
    // A digit shared by every id (small tables, high bits) needs no pass.
    if (std::find(start.begin() + 1, start.end(), n) != start.end()) continue;
    for (size_t d = 1; d <= kBuckets; ++d) start[d] += start[d - 1];
    for (int64_t i = 0; i < n; ++i) {
      const auto digit = (static_cast<uint64_t>(src[i].id) >> shift) & (kBuckets - 1);
      dst[start[digit]++] = src[i];
    }
    std::swap(src, dst);
  }
  if (src != data) std::copy(src, src + n, data);
}

}  // namespace

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
}

template <typename T>
void EmbeddingBagCollection<T>::Forward(const ValidatedBatch& batch, int64_t b0, int64_t b1,
                                        T* pooled) const {
  const BatchView& view = batch.view;
  DLRM_INTERNAL_CHECK(view.num_sparse == num_features());
  DLRM_INTERNAL_CHECK(batch.offsets.size() ==
                      static_cast<size_t>(num_features()) * view.batch_size + 1);
  DLRM_INTERNAL_CHECK(0 <= b0 && b0 <= b1 && b1 <= view.batch_size);
  for (int64_t b = b0; b < b1; ++b) {
    T* out_row = pooled + (b - b0) * pooled_width_;
    std::fill(out_row, out_row + pooled_width_, T(0));
    for (int32_t f = 0; f < num_features(); ++f) {
      const FeatureBinding& fb = features_[f];
      const EmbeddingTable<T>& table = (*tables_)[fb.table];
      const int32_t dim = table.dim();
      T* out = out_row + fb.offset;
      const int64_t begin = batch.bag_begin(f, b), end = batch.bag_end(f, b);
      for (int64_t i = begin; i < end; ++i) {
        const T w = view.weights ? static_cast<T>(view.weights[i]) : T(1);
        const T* row = table.row(view.ids[i]);
        for (int32_t k = 0; k < dim; ++k) out[k] += w * row[k];
      }
      if (fb.mean && end > begin) {
        const auto len = static_cast<T>(end - begin);
        for (int32_t k = 0; k < dim; ++k) out[k] /= len;
      }
    }
  }
}

template <typename T>
void EmbeddingBagCollection<T>::BackwardAndUpdate(const ValidatedBatch& batch,
                                                  const T* d_pooled,
                                                  SparseOptimizer<T>& optimizer, float lr,
                                                  int64_t step, ThreadPool* pool) {
  const BatchView& view = batch.view;
  DLRM_INTERNAL_CHECK(view.num_sparse == num_features());
  DLRM_INTERNAL_CHECK(batch.offsets.size() ==
                      static_cast<size_t>(num_features()) * view.batch_size + 1);
  const int64_t B = view.batch_size;
  const int64_t num_ids = view.num_ids;
  if (num_ids == 0) return;
  const auto num_tables = static_cast<int32_t>(tables_->size());

  // Per id occurrence, the slice of d_pooled and the factor its gradient is made of.
  std::vector<GradSource<T>> sources(static_cast<size_t>(num_ids));
  for (int32_t f = 0; f < num_features(); ++f) {
    const FeatureBinding& fb = features_[f];
    for (int64_t b = 0; b < B; ++b) {
      const int64_t begin = batch.bag_begin(f, b), end = batch.bag_end(f, b);
      if (begin == end) continue;
      const T scale = fb.mean ? T(1) / static_cast<T>(end - begin) : T(1);
      const int64_t base = b * pooled_width_ + fb.offset;
      for (int64_t i = begin; i < end; ++i) {
        const T w = view.weights ? static_cast<T>(view.weights[i]) : T(1);
        sources[i] = {base, w * scale};
      }
    }
  }

  // Occurrences grouped by table; within a table, features in index order, so each
  // group starts out in position order (features are stored feature-major).
  std::vector<int64_t> table_begin(num_tables + 1, 0);
  for (int32_t f = 0; f < num_features(); ++f)
    table_begin[features_[f].table + 1] += batch.bag_begin(f + 1, 0) - batch.bag_begin(f, 0);
  for (int32_t t = 0; t < num_tables; ++t) table_begin[t + 1] += table_begin[t];
  std::vector<Touch> touches(static_cast<size_t>(num_ids));
  for (int32_t t = 0; t < num_tables; ++t) {
    int64_t next = table_begin[t];
    for (int32_t f = 0; f < num_features(); ++f) {
      if (features_[f].table != t) continue;
      for (int64_t i = batch.bag_begin(f, 0); i < batch.bag_begin(f + 1, 0); ++i)
        touches[next++] = {view.ids[i], i};
    }
  }

  // Sorting each group stably by id yields (id, position) order; each run of one id is a
  // segment whose gradient is summed in that order and applied once.
  std::vector<Touch> scratch(touches.size());
  std::vector<int64_t> segment_begin;
  std::vector<int32_t> segment_table;
  int32_t max_dim = 0;
  for (int32_t t = 0; t < num_tables; ++t) {
    const int64_t begin = table_begin[t], end = table_begin[t + 1];
    if (begin == end) continue;
    const EmbeddingTable<T>& table = (*tables_)[t];
    SortById(touches.data() + begin, scratch.data(), end - begin, KeyBits(table.num_rows()));
    max_dim = std::max(max_dim, table.dim());
    for (int64_t j = begin; j < end; ++j) {
      if (j == begin || touches[j].id != touches[j - 1].id) {
        segment_begin.push_back(j);
        segment_table.push_back(t);
      }
    }
  }
  const auto num_segments = static_cast<int64_t>(segment_table.size());
  segment_begin.push_back(num_ids);

  auto update_segments = [&](int64_t s0, int64_t s1) {
    std::vector<T> grad(static_cast<size_t>(max_dim));
    for (int64_t s = s0; s < s1; ++s) {
      const int32_t t = segment_table[s];
      EmbeddingTable<T>& table = (*tables_)[t];
      const int32_t dim = table.dim();
      std::fill(grad.begin(), grad.begin() + dim, T(0));
      for (int64_t j = segment_begin[s]; j < segment_begin[s + 1]; ++j) {
        const GradSource<T>& src = sources[touches[j].pos];
        const T* d = d_pooled + src.base;
        for (int32_t k = 0; k < dim; ++k) grad[k] += src.coef * d[k];
      }
      const int64_t id = touches[segment_begin[s]].id;
      optimizer.UpdateRow(t, id, table.row(id), grad.data(), dim, lr, step);
    }
  };

  // Each segment is reduced whole by one task, so the split never changes a result.
  const int64_t parts =
      pool ? std::min<int64_t>(num_segments, pool->num_threads() * kTasksPerThread) : 1;
  if (parts <= 1) {
    update_segments(0, num_segments);
    return;
  }
  pool->ParallelFor(parts, [&](int64_t p) {
    update_segments(SplitBegin(num_segments, parts, p), SplitBegin(num_segments, parts, p + 1));
  });
}

template class EmbeddingBagCollection<float>;
template class EmbeddingBagCollection<double>;

}  // namespace dlrm

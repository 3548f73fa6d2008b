#include "engine/data/batch.h"

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "engine/core/parallel_copy.h"
#include "engine/core/status.h"

namespace dlrm {

namespace {

// Values one task checks at least: below that a split costs more than the scan.
constexpr int64_t kCheckSlice = int64_t{1} << 15;

// Values [begin, end) checked by one predicate, the caller's `which`.
struct CheckRange {
  int64_t begin, end;
  size_t which;
};

// The first (i, which), in the ranges' order, with bad(which, i), or (-1, 0). The ranges are
// cut into slices of at least kCheckSlice values (about 4 per pool thread) scanned in
// parallel; the lowest slice's first hit is kept, so the answer is the sequential scan's on
// any pool, and many short ranges (a feature's ids each) still spread over every thread.
template <typename Bad>
std::pair<int64_t, size_t> FirstBadIn(ThreadPool* pool, const std::vector<CheckRange>& ranges,
                                      const Bad& bad) {
  int64_t total = 0;
  for (const CheckRange& r : ranges) total += std::max<int64_t>(0, r.end - r.begin);
  const int64_t threads = pool != nullptr ? pool->num_threads() : 1;
  const int64_t slice = std::max(kCheckSlice, total / (threads * 4));
  std::vector<CheckRange> slices;
  for (const CheckRange& r : ranges) {
    const int64_t n = r.end - r.begin;
    const int64_t parts = std::max<int64_t>(1, n / slice);
    for (int64_t p = 0; n > 0 && p < parts; ++p)
      slices.push_back(
          {r.begin + SplitBegin(n, parts, p), r.begin + SplitBegin(n, parts, p + 1), r.which});
  }
  std::vector<int64_t> first(slices.size(), -1);
  ParallelFor(pool, static_cast<int64_t>(slices.size()), [&](int64_t s) {
    const CheckRange& r = slices[static_cast<size_t>(s)];
    for (int64_t i = r.begin; i < r.end; ++i)
      if (bad(r.which, i)) {
        first[static_cast<size_t>(s)] = i;
        return;
      }
  });
  for (size_t s = 0; s < slices.size(); ++s)
    if (first[s] >= 0) return {first[s], slices[s].which};
  return {-1, 0};
}

// The first i in [begin, end) with bad(i), or -1 (FirstBadIn of one range).
template <typename Bad>
int64_t FirstBad(ThreadPool* pool, int64_t begin, int64_t end, const Bad& bad) {
  return FirstBadIn(pool, {{begin, end, 0}}, [&](size_t, int64_t i) { return bad(i); }).first;
}

void CheckHeader(const BatchView& batch, int32_t expected_dense, int32_t F, bool require_labels) {
  const int64_t B = batch.batch_size;
  if (B <= 0 || B > kMaxBatchSize)
    ThrowInvalid("batch.batch_size must be in [1, 2^31 - 1], got ", B);
  if (batch.num_dense != expected_dense)
    ThrowInvalid("batch.num_dense is ", batch.num_dense, " but the model has ", expected_dense,
                 " dense features");
  if (batch.num_sparse != F)
    ThrowInvalid("batch.num_sparse is ", batch.num_sparse, " but the model has ", F,
                 " sparse features");
  if (expected_dense > 0 && batch.dense == nullptr) ThrowInvalid("batch.dense is NULL");
  if (require_labels && batch.labels == nullptr) ThrowInvalid("batch.labels is NULL");
  if (F > 0 && batch.lengths == nullptr) ThrowInvalid("batch.lengths is NULL");
  if (batch.num_ids < 0) ThrowInvalid("batch.num_ids must be >= 0, got ", batch.num_ids);
  if (batch.num_ids > 0 && batch.ids == nullptr) ThrowInvalid("batch.ids is NULL");
}

void CheckDenseAndLabels(const BatchView& batch, int32_t expected_dense, ThreadPool* pool) {
  const int64_t B = batch.batch_size;
  const int64_t bad = FirstBad(pool, 0, B * expected_dense,
                               [&](int64_t i) { return !std::isfinite(batch.dense[i]); });
  if (bad >= 0)
    ThrowInvalid("batch.dense[", bad / expected_dense, "][", bad % expected_dense,
                 "] is not finite (", batch.dense[bad], ")");
  if (batch.labels != nullptr) {
    for (int64_t b = 0; b < B; ++b) {
      const float y = batch.labels[b];
      if (!std::isfinite(y)) ThrowInvalid("batch.labels[", b, "] is not finite (", y, ")");
      if (y < 0.0f || y > 1.0f) ThrowInvalid("batch.labels[", b, "] = ", y, " is outside [0, 1]");
    }
  }
}

// offsets[f * B + b] = where bag (f, b) starts; kInvalidArgument for a negative length or
// lengths that do not sum to num_ids.
std::vector<int64_t> BagOffsets(const BatchView& batch, int32_t F) {
  const int64_t B = batch.batch_size;
  std::vector<int64_t> offsets(static_cast<size_t>(F) * B + 1);
  int64_t total = 0;
  for (int32_t f = 0; f < F; ++f) {
    for (int64_t b = 0; b < B; ++b) {
      const int32_t len = batch.lengths[f * B + b];
      if (len < 0)
        ThrowInvalid("batch.lengths[", f * B + b, "] (feature ", f, ", sample ", b,
                     ") is negative: ", len);
      offsets[f * B + b] = total;
      total += len;
    }
  }
  offsets[F * B] = total;
  if (total != batch.num_ids)
    ThrowInvalid("batch.num_ids is ", batch.num_ids, " but the lengths sum to ", total);
  return offsets;
}

void CheckIdsAndWeights(const ValidatedBatch& out, const std::vector<SparseFeatureSpec>& features,
                        ThreadPool* pool) {
  const BatchView& batch = out.view;
  const int64_t B = batch.batch_size;
  // Every feature's ids in one parallel scan: a feature alone is often too short to split.
  std::vector<CheckRange> ranges;
  for (size_t f = 0; f < features.size(); ++f)
    if (!features[f].any_id) ranges.push_back({out.offsets[f * B], out.offsets[(f + 1) * B], f});
  const auto [bad_id, f] = FirstBadIn(pool, ranges, [&](size_t feature, int64_t i) {
    return batch.ids[i] < 0 || batch.ids[i] >= features[feature].num_rows;
  });
  if (bad_id >= 0)
    Throw(StatusCode::kOutOfRange, "batch.ids[", bad_id, "] = ", batch.ids[bad_id], " (feature ", f,
          ") is outside its table's range [0, ", features[f].num_rows, ")");
  if (batch.weights == nullptr) return;
  const int64_t bad =
      FirstBad(pool, 0, batch.num_ids, [&](int64_t i) { return !std::isfinite(batch.weights[i]); });
  if (bad >= 0) ThrowInvalid("batch.weights[", bad, "] is not finite (", batch.weights[bad], ")");
}

}  // namespace

ValidatedBatch ValidateBatch(const BatchView& batch, int32_t expected_dense,
                             const std::vector<SparseFeatureSpec>& features, bool require_labels,
                             ThreadPool* pool) {
  const auto F = static_cast<int32_t>(features.size());
  CheckHeader(batch, expected_dense, F, require_labels);
  CheckDenseAndLabels(batch, expected_dense, pool);
  ValidatedBatch out;
  out.view = batch;
  out.offsets = BagOffsets(batch, F);
  CheckIdsAndWeights(out, features, pool);
  return out;
}

OwnedValidBatch::OwnedValidBatch(OwnedBatch owned, std::vector<int64_t> offsets)
    : owned_(std::move(owned)) {
  valid_.view = owned_.view();
  valid_.offsets = std::move(offsets);
}

void OwnedValidBatch::Refill(const BatchView& view, std::vector<int64_t> offsets,
                             ThreadPool* pool) {
  CopyBatchInto(view, &owned_, pool);
  valid_.view = owned_.view();
  valid_.offsets = std::move(offsets);
}

std::vector<BatchView> ViewsOf(const std::vector<OwnedBatch>& batches) {
  std::vector<BatchView> views;
  views.reserve(batches.size());
  for (const OwnedBatch& b : batches) views.push_back(b.view());
  return views;
}

namespace {

// to = from[0 .. count), its storage reused; in slices on `pool`.
template <typename T>
void AssignInParallel(ThreadPool* pool, const T* from, size_t count, std::vector<T>* to) {
  to->resize(from != nullptr ? count : 0);
  if (from != nullptr) CopyInParallel(pool, from, count, to->data());
}

}  // namespace

void CopyBatchInto(const BatchView& view, OwnedBatch* out, ThreadPool* pool) {
  out->batch_size = view.batch_size;
  out->num_dense = view.num_dense;
  out->num_sparse = view.num_sparse;
  const auto B = static_cast<size_t>(view.batch_size);
  const auto num_ids = static_cast<size_t>(view.num_ids);
  AssignInParallel(pool, view.dense, B * static_cast<size_t>(view.num_dense), &out->dense);
  AssignInParallel(pool, view.labels, B, &out->labels);
  AssignInParallel(pool, view.lengths, static_cast<size_t>(view.num_sparse) * B, &out->lengths);
  AssignInParallel(pool, view.ids, num_ids, &out->ids);
  AssignInParallel(pool, view.weights, num_ids, &out->weights);
}

OwnedBatch CopyBatch(const BatchView& view) {
  OwnedBatch b;
  CopyBatchInto(view, &b, nullptr);
  return b;
}

OwnedBatch SliceBatch(const BatchView& view, int64_t begin, int64_t end) {
  if (begin < 0 || end > view.batch_size || begin >= end)
    ThrowInvalid("slice [", begin, ", ", end, ") of a batch of ", view.batch_size,
                 " samples is empty or out of range");
  OwnedBatch b;
  b.batch_size = end - begin;
  b.num_dense = view.num_dense;
  b.num_sparse = view.num_sparse;
  b.dense.assign(view.dense + begin * view.num_dense, view.dense + end * view.num_dense);
  if (view.labels) b.labels.assign(view.labels + begin, view.labels + end);
  int64_t pos = 0;
  for (int32_t f = 0; f < view.num_sparse; ++f) {
    const int32_t* lengths = view.lengths + f * view.batch_size;
    for (int64_t s = 0; s < view.batch_size; ++s) {
      const int32_t len = lengths[s];
      if (s >= begin && s < end) {
        b.lengths.push_back(len);
        b.ids.insert(b.ids.end(), view.ids + pos, view.ids + pos + len);
        if (view.weights)
          b.weights.insert(b.weights.end(), view.weights + pos, view.weights + pos + len);
      }
      pos += len;
    }
  }
  return b;
}

}  // namespace dlrm

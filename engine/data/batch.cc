#include "engine/data/batch.h"

#include <cmath>
#include <utility>

#include "engine/core/status.h"

namespace dlrm {

ValidatedBatch ValidateBatch(const BatchView& batch, int32_t expected_dense,
                             const std::vector<SparseFeatureSpec>& features, bool require_labels) {
  const int64_t B = batch.batch_size;
  if (B <= 0 || B > kMaxBatchSize)
    ThrowInvalid("batch.batch_size must be in [1, 2^31 - 1], got ", B);
  if (batch.num_dense != expected_dense)
    ThrowInvalid("batch.num_dense is ", batch.num_dense, " but the model has ", expected_dense,
                 " dense features");
  const int32_t F = static_cast<int32_t>(features.size());
  if (batch.num_sparse != F)
    ThrowInvalid("batch.num_sparse is ", batch.num_sparse, " but the model has ", F,
                 " sparse features");
  if (expected_dense > 0 && batch.dense == nullptr) ThrowInvalid("batch.dense is NULL");
  if (require_labels && batch.labels == nullptr) ThrowInvalid("batch.labels is NULL");
  if (F > 0 && batch.lengths == nullptr) ThrowInvalid("batch.lengths is NULL");
  if (batch.num_ids < 0) ThrowInvalid("batch.num_ids must be >= 0, got ", batch.num_ids);
  if (batch.num_ids > 0 && batch.ids == nullptr) ThrowInvalid("batch.ids is NULL");

  const int64_t dense_count = B * expected_dense;
  for (int64_t i = 0; i < dense_count; ++i) {
    if (!std::isfinite(batch.dense[i]))
      ThrowInvalid("batch.dense[", i / expected_dense, "][", i % expected_dense,
                   "] is not finite (", batch.dense[i], ")");
  }
  if (batch.labels != nullptr) {
    for (int64_t b = 0; b < B; ++b) {
      const float y = batch.labels[b];
      if (!std::isfinite(y)) ThrowInvalid("batch.labels[", b, "] is not finite (", y, ")");
      if (y < 0.0f || y > 1.0f) ThrowInvalid("batch.labels[", b, "] = ", y, " is outside [0, 1]");
    }
  }

  ValidatedBatch out;
  out.view = batch;
  out.offsets.resize(static_cast<size_t>(F) * B + 1);
  int64_t total = 0;
  for (int32_t f = 0; f < F; ++f) {
    for (int64_t b = 0; b < B; ++b) {
      const int32_t len = batch.lengths[f * B + b];
      if (len < 0)
        ThrowInvalid("batch.lengths[", f * B + b, "] (feature ", f, ", sample ", b,
                     ") is negative: ", len);
      out.offsets[f * B + b] = total;
      total += len;
    }
  }
  out.offsets[F * B] = total;
  if (total != batch.num_ids)
    ThrowInvalid("batch.num_ids is ", batch.num_ids, " but the lengths sum to ", total);

  for (int32_t f = 0; f < F; ++f) {
    if (features[f].any_id) continue;
    const int64_t rows = features[f].num_rows;
    for (int64_t i = out.offsets[f * B]; i < out.offsets[(f + 1) * B]; ++i) {
      const int64_t id = batch.ids[i];
      if (id < 0 || id >= rows)
        Throw(StatusCode::kOutOfRange, "batch.ids[", i, "] = ", id, " (feature ", f,
              ") is outside its table's range [0, ", rows, ")");
    }
  }
  if (batch.weights != nullptr) {
    for (int64_t i = 0; i < total; ++i)
      if (!std::isfinite(batch.weights[i]))
        ThrowInvalid("batch.weights[", i, "] is not finite (", batch.weights[i], ")");
  }
  return out;
}

OwnedValidBatch::OwnedValidBatch(OwnedBatch owned, std::vector<int64_t> offsets)
    : owned_(std::move(owned)) {
  valid_.view = owned_.view();
  valid_.offsets = std::move(offsets);
}

std::vector<BatchView> ViewsOf(const std::vector<OwnedBatch>& batches) {
  std::vector<BatchView> views;
  views.reserve(batches.size());
  for (const OwnedBatch& b : batches) views.push_back(b.view());
  return views;
}

OwnedBatch CopyBatch(const BatchView& view) {
  OwnedBatch b;
  b.batch_size = view.batch_size;
  b.num_dense = view.num_dense;
  b.num_sparse = view.num_sparse;
  b.dense.assign(view.dense, view.dense + view.batch_size * view.num_dense);
  if (view.labels) b.labels.assign(view.labels, view.labels + view.batch_size);
  b.lengths.assign(view.lengths,
                   view.lengths + static_cast<int64_t>(view.num_sparse) * view.batch_size);
  b.ids.assign(view.ids, view.ids + view.num_ids);
  if (view.weights) b.weights.assign(view.weights, view.weights + view.num_ids);
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

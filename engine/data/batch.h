// The one data contract: a borrowed, column-oriented batch (TorchRec KeyedJaggedTensor
// layout). See DESIGN: dense [B x Nd] row-major, labels [B], lengths [F x B]
// feature-major, ids [sum(lengths)] in the same order, optional per-id weights.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/core/thread_pool.h"

namespace dlrm {

struct BatchView {
  int64_t batch_size = 0;
  int32_t num_dense = 0;
  const float* dense = nullptr;   // [batch_size x num_dense]
  const float* labels = nullptr;  // [batch_size]; may be null for prediction
  int32_t num_sparse = 0;
  const int32_t* lengths = nullptr;  // [num_sparse x batch_size]
  int64_t num_ids = 0;
  const int64_t* ids = nullptr;    // [num_ids]
  const float* weights = nullptr;  // [num_ids] or null (all 1)
};

// What the engine knows about the tables a batch will be looked up in.
struct SparseFeatureSpec {
  int32_t table = 0;     // table index
  int64_t num_rows = 0;  // valid ids are [0, num_rows)
  bool any_id = false;   // a DYNAMIC table's feature: every int64 id is valid
};

// A batch that passed validation, plus derived indexing: offsets[f * B + b] is where bag
// (f, b) starts in ids; offsets[F * B] == num_ids.
struct ValidatedBatch {
  BatchView view;
  std::vector<int64_t> offsets;

  int64_t bag_begin(int32_t f, int64_t b) const { return offsets[f * view.batch_size + b]; }
  int64_t bag_end(int32_t f, int64_t b) const { return offsets[f * view.batch_size + b + 1]; }
};

// The most samples a batch may have: every size derived from it (dense values, bags) then
// fits an int64, whatever a caller puts in batch_size.
inline constexpr int64_t kMaxBatchSize = (int64_t{1} << 31) - 1;

// Checks every field before any state changes and throws dlrm::Error naming the field,
// index and value that is wrong: null pointers, batch_size <= 0, num_dense / num_sparse
// mismatch with the model, negative lengths, sum(lengths) != num_ids, ids outside
// [0, num_rows) (unless any_id), NaN/Inf in dense, labels (when required) or weights, labels
// outside [0, 1].
// `pool` (may be null) scans large arrays in slices; the error is the same whichever.
ValidatedBatch ValidateBatch(const BatchView& batch, int32_t expected_dense,
                             const std::vector<SparseFeatureSpec>& features, bool require_labels,
                             ThreadPool* pool = nullptr);

// A batch that owns its storage (readers, generator, tests). view() borrows from it.
struct OwnedBatch {
  int64_t batch_size = 0;
  int32_t num_dense = 0;
  int32_t num_sparse = 0;
  std::vector<float> dense;
  std::vector<float> labels;
  std::vector<int32_t> lengths;
  std::vector<int64_t> ids;
  std::vector<float> weights;  // empty = unweighted

  BatchView view() const {
    BatchView v;
    v.batch_size = batch_size;
    v.num_dense = num_dense;
    v.dense = dense.data();
    v.labels = labels.empty() ? nullptr : labels.data();
    v.num_sparse = num_sparse;
    v.lengths = lengths.data();
    v.num_ids = static_cast<int64_t>(ids.size());
    v.ids = ids.data();
    v.weights = weights.empty() ? nullptr : weights.data();
    return v;
  }
};

// A validated batch that owns its storage: an asynchronous step's copy of the caller's
// batch, with ValidateBatch's offsets kept, so that it is indexed once. batch().view
// borrows from it, so it is neither copied nor moved (hold it by pointer).
class OwnedValidBatch {
 public:
  OwnedValidBatch() = default;  // an empty batch, to Refill
  // `offsets`: ValidateBatch's offsets of the batch `owned` copies.
  OwnedValidBatch(OwnedBatch owned, std::vector<int64_t> offsets);
  OwnedValidBatch(const OwnedValidBatch&) = delete;
  OwnedValidBatch& operator=(const OwnedValidBatch&) = delete;

  const ValidatedBatch& batch() const { return valid_; }
  // Copies `view` (validated, with ValidateBatch's `offsets`) in place of the batch held,
  // reusing its storage (CopyBatchInto): a queue that recycles these allocates nothing
  // for batches of one shape.
  void Refill(const BatchView& view, std::vector<int64_t> offsets, ThreadPool* pool);

 private:
  OwnedBatch owned_;
  ValidatedBatch valid_;
};

// The views of owned batches (the batches must outlive them).
std::vector<BatchView> ViewsOf(const std::vector<OwnedBatch>& batches);

// Copies a borrowed batch into owned storage (what an asynchronous submit keeps).
// The view must have passed ValidateBatch (sizes are trusted).
OwnedBatch CopyBatch(const BatchView& view);
// CopyBatch into `out`, reusing its vectors' storage (nothing allocated when it held a
// batch at least this large), the large arrays copied in slices on `pool` (may be null).
void CopyBatchInto(const BatchView& view, OwnedBatch* out, ThreadPool* pool);

// Samples [begin, end) of a batch (a trainer's part of a global batch). The view must
// have passed ValidateBatch; kInvalidArgument for an empty or out-of-range slice.
OwnedBatch SliceBatch(const BatchView& view, int64_t begin, int64_t end);

}  // namespace dlrm

// Pooled embedding lookups for all sparse features (forward), and the backward pass
// fused with the sparse optimizer.
//
// Determinism: for each table, the (id, position) pairs of every feature that uses it are
// ordered by id, then by position in the batch's ids array; each id's gradient is summed
// in that order and handed to the optimizer once. The result does not depend on the
// number of threads that process the ids.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "engine/core/thread_pool.h"
#include "engine/data/batch.h"
#include "engine/embedding/embedding_table.h"
#include "engine/embedding/sparse_optimizer.h"

namespace dlrm {

// The rows [begin, end) of a table that an embedding server's shard holds; ids outside
// are someone else's. The shard's local row of id is id - begin.
struct RowRange {
  int64_t begin = 0;
  int64_t end = 0;
};

struct FeatureBinding {
  int32_t table = 0;   // index into the tables vector
  int32_t offset = 0;  // first column of this feature in a pooled row
  bool mean = false;   // MEAN pooling (an empty bag pools to zeros), else SUM
};

template <typename T>
class EmbeddingBagCollection {
 public:
  // tables is borrowed and must outlive this object. pooled_width = sum of the features'
  // table dims.
  EmbeddingBagCollection(std::vector<EmbeddingTable<T>>* tables,
                         std::vector<FeatureBinding> features, int32_t pooled_width);
  ~EmbeddingBagCollection();
  EmbeddingBagCollection(const EmbeddingBagCollection&) = delete;
  EmbeddingBagCollection& operator=(const EmbeddingBagCollection&) = delete;

  int32_t pooled_width() const { return pooled_width_; }
  int32_t num_features() const { return static_cast<int32_t>(features_.size()); }

  // pooled [(b1 - b0) x pooled_width] for samples [b0, b1) of the batch:
  // sum (or mean) over the bag of weight_i * table.row(id_i). scratch (optional, reused by
  // the caller across calls) holds the rows' addresses.
  void Forward(const ValidatedBatch& batch, int64_t b0, int64_t b1, T* pooled,
               std::vector<const T*>* scratch = nullptr) const;

  // d_pooled [B x pooled_width] is the loss gradient for the whole batch. Sums each
  // touched row's gradient in (id, position) order and calls optimizer.UpdateRow once per
  // touched row; work is spread over the pool by ranges of distinct ids. Not reentrant
  // (it reuses one workspace across steps); training steps are serialized by the engine.
  // With row_ranges (one per table), table t holds only the rows of row_ranges[t]: ids
  // outside it are skipped, the others update local row id - begin. Every id's sum is
  // formed exactly as without ranges, so shards reproduce the whole table's update.
  void BackwardAndUpdate(const ValidatedBatch& batch, const T* d_pooled,
                         SparseOptimizer<T>& optimizer, float lr, int64_t step, ThreadPool* pool,
                         const std::vector<RowRange>* row_ranges = nullptr);

 private:
  struct Workspace;  // the backward's index arrays, kept at their peak size across steps

  std::vector<EmbeddingTable<T>>* tables_;
  std::vector<FeatureBinding> features_;
  int32_t pooled_width_;
  bool features_tile_row_ = false;  // columns [0, pooled_width_) covered once each
  std::unique_ptr<Workspace> workspace_;
};

}  // namespace dlrm

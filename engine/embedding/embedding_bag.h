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

// Which of `num_tables` tables some feature binds (1; else 0): the tables a bag set over
// `features` pools and updates. Every feature's table must be below num_tables.
std::vector<char> BoundTables(const std::vector<FeatureBinding>& features, size_t num_tables);

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
  const std::vector<FeatureBinding>& features() const { return features_; }

  // pooled [(b1 - b0) x pooled_width] for samples [b0, b1) of the batch:
  // sum (or mean) over the bag of weight_i * the values of table row id_i (widened from a
  // BF16 / FP16 row, dequantized from an INT8 / INT4 one). scratch (optional, reused by
  // the caller across calls) holds the rows' addresses.
  void Forward(const ValidatedBatch& batch, int64_t b0, int64_t b1, T* pooled,
               std::vector<const void*>* scratch = nullptr) const;
  // pooled [B x pooled_width] for the whole batch: Forward over runs of 256 samples spread
  // over the pool (each sample's sums are Forward's, whatever the pool).
  void ForwardBatch(const ValidatedBatch& batch, T* pooled, ThreadPool* pool) const;

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
  // BackwardAndUpdate in two halves, for a step that must know that every update is
  // finite before it writes any (its dense update's too): UpdateIsFinite groups the
  // batch's touched rows, sums each row's gradient and asks the optimizer whether the
  // row's update would be finite, writing nothing; ApplyUpdate then updates the rows the
  // last UpdateIsFinite grouped with the sums it kept (up to 256 MiB of them; past that it
  // sums again, in the same order): the same bits as BackwardAndUpdate. d_pooled must be
  // the same in both calls.
  bool UpdateIsFinite(const ValidatedBatch& batch, const T* d_pooled,
                      const SparseOptimizer<T>& optimizer, float lr, int64_t step, ThreadPool* pool,
                      const std::vector<RowRange>* row_ranges = nullptr);
  void ApplyUpdate(const T* d_pooled, SparseOptimizer<T>& optimizer, float lr, int64_t step,
                   ThreadPool* pool);

 private:
  struct Workspace;  // the backward's index arrays, kept at their peak size across steps

  // The forward of bag (f, b) into out (its columns of the pooled row) from rows[next ..)
  // (the first pass's row addresses, in the order they are pooled, so each kernel can ask
  // for the row a few ahead, whichever table it is in); returns the next unused row.
  size_t PoolBag(const ValidatedBatch& batch, int32_t f, int64_t b,
                 const std::vector<const void*>& rows, size_t next, T* out) const;
  // PoolBag of an FP32 table's bag of `count` rows.
  void PoolFloatRows(const void* const* rows, int64_t count, int64_t available,
                     const float* weights, bool mean, int32_t dim, T* out) const;

  // The phases of the backward, each over the workspace: the occurrences' sources in
  // d_pooled, the occurrences grouped by (table, row) and sorted, the runs of one row
  // (segments) listed in table order.
  void Segment(const ValidatedBatch& batch, ThreadPool* pool,
               const std::vector<RowRange>* row_ranges);
  void SourcesOf(const ValidatedBatch& batch, ThreadPool* pool);
  void GroupByRow(const ValidatedBatch& batch, ThreadPool* pool,
                  const std::vector<RowRange>* row_ranges);
  void ListSegments();
  // grad[0 .. dim) = segment s's summed gradient, in (id, position) order; returns its row.
  int64_t SumRowGradient(int64_t s, const T* d_pooled, T* grad) const;
  // Tasks the segments are split into.
  static int64_t SegmentParts(int64_t num_segments, ThreadPool* pool);
  // Asks for segment s's row and optimizer state ahead of their use.
  void PrefetchSegment(int64_t s, const SparseOptimizer<T>& optimizer, bool has_state) const;

  std::vector<EmbeddingTable<T>>* tables_;
  std::vector<FeatureBinding> features_;
  int32_t pooled_width_;
  bool features_tile_row_ = false;  // columns [0, pooled_width_) covered once each
  std::unique_ptr<Workspace> workspace_;
};

}  // namespace dlrm

// The Neo/ZionEX layout of a training step over the ranks of one job, one GPU each:
// embeddings model-parallel, MLPs data-parallel. This is the exchange's arithmetic only
// (what each rank pools, sends and receives, and where each value lands); the trainer
// moves the buffers (NCCL's all-to-all on GPUs, cuda/nccl_communicator.h).
//
// A global batch of B samples is split into world_size runs of b = B / world_size samples;
// rank q trains on samples [q * b, (q + 1) * b). A step:
//  1. Input: rank q splits its local batch by owner (SplitInput): owner r gets the bags of
//     the features it pools (input_features(r)) for q's samples. Owner r joins the parts
//     of ranks 0..W-1 in rank order (JoinInput): the bags of its features for all B samples.
//  2. Forward: owner r pools its slices (a slice: some columns of one feature, read from
//     its shard of the feature's table) for all B samples into [B x owned_width(r)],
//     sample-major. Block q of it (the rows of q's samples) is contiguous and goes to q.
//     Rank q scatters the W blocks it receives into its [b x pooled_width] pooled rows, in
//     the model's column order (Assemble). DATA_PARALLEL tables are replicated: every rank
//     pools those (local_slices()) for its own samples; they are never exchanged.
//  3. Backward: rank q gathers, per owner r, its d_pooled columns of r's slices into a
//     [b x owned_width(r)] block (Split); owner r receives the W blocks in rank order,
//     which concatenated ARE the gradient of its [B x owned_width(r)] pooled output.
// The owner's pooling and its fused backward + optimizer then see exactly the bags, and
// the gradient rows, that one process would: a step equals the single-process step.
//
// Slices: TABLE_WISE shards are whole tables; COLUMN_WISE shards are column blocks (a
// block pools exactly its columns of the full row's sum; not with row-wise Adagrad, whose
// statistic is per whole row).
//
// Row-wise pieces (ROW_WISE shards of some rows, whole columns, on distinct ranks; one of
// all rows is a whole table, pooled by its holder as a TABLE_WISE shard) are not
// pooled by their holders, whose partial sums would change the bags' order of addition.
// Such a table is fetched: in step 1 rank q asks each piece's rank for the distinct rows
// of its own samples' bags in that piece (the servers' lookups); in step 2 the rows come
// back and q pools its fetched features itself ([b x fetched_width()], fetched_slices()),
// in bag order, as one process would; in step 3 q sends each piece's rank the features'
// bags and gradients (ps::FeatureUpdate), and the rank applies every rank's, in rank
// order, to its rows (the servers' update). TABLE_ROW_WISE is the servers' and refused.
//
// Threading: immutable after construction. Errors: kInvalidArgument naming the table,
// shard, rank or size that is wrong, thrown by the constructor and the functions.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/config/dlrm.pb.h"
#include "engine/data/batch.h"
#include "engine/shard/plan.pb.h"

namespace dlrm::shard {

// The piece of a table a rank holds: rows [0, num_rows) x columns [col_begin, col_end).
struct OwnedShard {
  int32_t table = 0;  // model.tables index
  int32_t col_begin = 0, col_end = 0;
  int32_t width() const { return col_end - col_begin; }
};

// Some columns of one feature's pooled vector, pooled by one rank.
struct PooledSlice {
  int32_t feature = 0;        // model.sparse_features index
  int32_t shard = 0;          // into owned_shards(owner) or local_shards()
  int32_t pooled_column = 0;  // its first column in a sample's pooled row
  int32_t owned_column = 0;   // its first column in the owner's pooled row
  int32_t width = 0;
  bool mean = false;  // MEAN pooling
};

// Rows [row_begin, row_end) of a fetched table, whole columns, held by `rank`.
struct RowPiece {
  int32_t rank = 0;
  int64_t row_begin = 0, row_end = 0;
};

// A table cut into row-wise pieces, which every rank fetches rows of.
struct FetchedTable {
  int32_t table = 0;             // model.tables index
  std::vector<RowPiece> pieces;  // in row order, tiling [0, num_rows)
};

class PooledLayout {
 public:
  // config: passed ValidateConfig; plan: PlanSharding(config, world_size)'s result
  // (plan.num_servers == world_size).
  PooledLayout(const config::DlrmConfig& config, const ShardingPlan& plan, int32_t world_size);

  int32_t world_size() const { return world_size_; }
  int32_t pooled_width() const { return pooled_width_; }

  // What rank r holds and pools for the global batch; owned_width(r) is its pooled row.
  // Slice k of owned_slices(r) pools feature k of JoinInput(r)'s batch: a rank holds at
  // most one piece of a table (column blocks of one table are on distinct ranks).
  const std::vector<OwnedShard>& owned_shards(int32_t rank) const;
  const std::vector<PooledSlice>& owned_slices(int32_t rank) const;
  int32_t owned_width(int32_t rank) const;
  // The model.sparse_features indices whose bags rank r needs (ascending).
  const std::vector<int32_t>& input_features(int32_t rank) const;
  // Replicated (DATA_PARALLEL) tables, which every rank pools for its own samples;
  // owned_column is the column in local_width()'s row. Slices in feature order (slice k:
  // feature k of LocalInput's batch).
  const std::vector<OwnedShard>& local_shards() const { return local_shards_; }
  const std::vector<PooledSlice>& local_slices() const { return local_slices_; }
  int32_t local_width() const { return local_width_; }

  // Tables cut into row-wise pieces, in table order; every rank pools their features for
  // its own samples (fetched_slices(): shard is the fetched_tables() index, owned_column
  // the column in fetched_width()'s row; slice k: feature k of FetchedInput's batch).
  const std::vector<FetchedTable>& fetched_tables() const { return fetched_tables_; }
  const std::vector<PooledSlice>& fetched_slices() const { return fetched_slices_; }
  int32_t fetched_width() const { return fetched_width_; }
  // The model.sparse_features indices whose table has a row-wise piece on rank r
  // (ascending): the features of the updates r applies to its pieces.
  const std::vector<int32_t>& range_features(int32_t rank) const;

  // b: samples per rank of a global batch; kInvalidArgument unless B is a positive
  // multiple of world_size().
  int64_t SamplesPerRank(int64_t global_batch) const;

  // Step 1. parts[r]: the bags of input_features(r) for `local`'s samples (no dense, no
  // labels). `local` must have passed ValidateBatch for the model.
  std::vector<OwnedBatch> SplitInput(const BatchView& local) const;
  // Step 1 on owner `rank`: parts from ranks 0..W-1, in rank order -> one batch of all
  // their samples, feature-major over input_features(rank). Parts may differ in size
  // (prediction; a training step's are equal). The parts came over the network: a
  // malformed one is kInvalidArgument naming its rank.
  OwnedBatch JoinInput(int32_t rank, const std::vector<OwnedBatch>& parts) const;
  // The bags of the local slices' features for `local`'s samples (slice k: feature k).
  OwnedBatch LocalInput(const BatchView& local) const;
  // The bags of the fetched slices' features for `local`'s samples (slice k: feature k).
  OwnedBatch FetchedInput(const BatchView& local) const;
  // Step 2 on rank q: blocks[r] is [b x owned_width(r)] from owner r, `local` the rank's
  // own [b x local_width()] pooling of the replicated tables and `fetched` its
  // [b x fetched_width()] pooling of the fetched ones -> pooled [b x pooled_width()].
  void Assemble(const std::vector<std::vector<float>>& blocks, const std::vector<float>& local,
                const std::vector<float>& fetched, int64_t b, float* pooled) const;
  // Step 3 on rank q: d_pooled [b x pooled_width()] -> blocks[r] [b x owned_width(r)], and
  // the replicated tables' columns into *local [b x local_width()].
  std::vector<std::vector<float>> Split(const float* d_pooled, int64_t b,
                                        std::vector<float>* local) const;

 private:
  void AddTable(const config::ModelConfig& model, int32_t table,
                const std::vector<const TableShard*>& shards);
  // AddTable's for a table cut into row-wise pieces.
  void AddFetchedTable(const config::ModelConfig& model, int32_t table,
                       const std::vector<const TableShard*>& shards);
  // One slice per feature reading table t, of `width` columns from `column` of its pooled
  // vector, with `shard` as given.
  std::vector<PooledSlice> SlicesOf(const config::ModelConfig& model, int32_t t, int32_t shard,
                                    int32_t column, int32_t width) const;
  void CheckRank(int32_t rank) const;
  // Sorts slices by feature and numbers their columns from 0; returns their width.
  static int32_t InFeatureOrder(std::vector<PooledSlice>* slices);
  // Where each feature's ids begin in `batch`, after checking its feature count.
  std::vector<int64_t> FeatureStartsOf(const BatchView& batch) const;

  int32_t world_size_ = 0;
  int32_t pooled_width_ = 0;
  std::vector<int32_t> feature_column_;                 // per feature: its first pooled column
  std::vector<std::vector<OwnedShard>> owned_shards_;   // by rank
  std::vector<std::vector<PooledSlice>> owned_slices_;  // by rank
  std::vector<int32_t> owned_width_;                    // by rank
  std::vector<std::vector<int32_t>> input_features_;    // by rank
  std::vector<OwnedShard> local_shards_;
  std::vector<PooledSlice> local_slices_;
  std::vector<int32_t> local_features_;
  int32_t local_width_ = 0;
  std::vector<FetchedTable> fetched_tables_;
  std::vector<PooledSlice> fetched_slices_;
  std::vector<int32_t> fetched_features_;
  int32_t fetched_width_ = 0;
  std::vector<std::vector<int32_t>> range_features_;  // by rank
};

}  // namespace dlrm::shard

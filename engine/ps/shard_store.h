// The embedding shards one owner holds, and the two things done to them (owner computes):
// lookups of rows and the step's fused sparse update.
//
// An owner is an embedding server (its shards of the sharding plan), a trainer that owns
// shards itself (the Neo layout: ShardRoles below) or, for the tables the plan replicates
// (DATA_PARALLEL), every trainer. Shards start from exactly the values of
// the single-process tables (EmbeddingTable::InitializeShard) and are updated by the
// single-process code (EmbeddingBagCollection::BackwardAndUpdate) over the global batch's
// bags in the global order, restricted to the shard's rows and columns. So in sync mode
// every row ends up bitwise equal to single-process training, for every sharding type;
// BF16 / FP16 tables too (a shard's stochastic rounding draws the whole table's bits).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "engine/config/dlrm.pb.h"
#include "engine/core/thread_pool.h"
#include "engine/data/batch.h"
#include "engine/embedding/embedding_bag.h"
#include "engine/embedding/embedding_table.h"
#include "engine/embedding/sparse_optimizer.h"
#include "engine/ps/feature_update.h"
#include "engine/shard/plan.pb.h"

namespace dlrm::ps {

// The owner id of the DATA_PARALLEL shards (held by every trainer).
constexpr int32_t kTrainerReplica = -1;

// One piece of a table and who holds it. An owner numbers its shards in plan order.
struct ShardLocation {
  int32_t owner = 0;  // server index, or kTrainerReplica
  int32_t index = 0;  // the shard's number in its owner's store
  int32_t table = 0;  // model.tables index
  int64_t row_begin = 0, row_end = 0;
  int32_t col_begin = 0, col_end = 0;

  // Whether the shard holds every row of its table (of `model`): a row-wise piece does not.
  bool whole_rows(const config::ModelConfig& model) const {
    return row_begin == 0 && row_end == model.tables(table).num_rows();
  }
  // Whether the two hold a value in common: the same table, crossing rows and columns.
  bool overlaps(const ShardLocation& other) const {
    return table == other.table && row_begin < other.row_end && other.row_begin < row_end &&
           col_begin < other.col_end && other.col_begin < col_end;
  }
};

// Every shard of the plan, grouped by table (result[t] lists table t's pieces). Throws
// kInvalidArgument when the plan does not fit the model, or a table's pieces overlap or
// leave some of its values out.
std::vector<std::vector<ShardLocation>> LocateShards(const config::ModelConfig& model,
                                                     const shard::ShardingPlan& plan);

// What an owner does with its shards: serve them (Lookup, and ApplyUpdate from feature
// updates) and pool them itself (the local batch's Pool and pooled update).
enum class ShardRoles {
  kAll,  // every shard both: an embedding server (it only serves), the trainers' replicas
  // A trainer that owns shards (the Neo layout): whole-row shards pooled by it for the
  // global batch, row-wise pieces served to the ranks that pool their bags.
  kPoolWholeRows,
};

class EmbeddingShardStore {
 public:
  using Shard = ShardLocation;

  // The shards of `plan` whose owner is `owner` (a server index, or kTrainerReplica).
  // config must have passed ValidateConfig and plan must be PlanSharding(config, ...).
  // Throws kInvalidArgument for a plan that does not fit the config, and for row-wise
  // Adagrad on a shard without whole rows (its per-row statistic needs every column).
  EmbeddingShardStore(const config::DlrmConfig& config, const shard::ShardingPlan& plan,
                      int32_t owner, ThreadPool* pool = nullptr,
                      ShardRoles roles = ShardRoles::kAll);
  ~EmbeddingShardStore();
  EmbeddingShardStore(const EmbeddingShardStore&) = delete;
  EmbeddingShardStore& operator=(const EmbeddingShardStore&) = delete;

  const std::vector<Shard>& shards() const { return shards_; }
  const EmbeddingTable<float>& shard_table(int32_t shard) const { return tables_[shard]; }
  // For restoring a checkpoint (shard_store_file.h); not while updates run.
  EmbeddingTable<float>& mutable_shard_table(int32_t shard) { return tables_[shard]; }
  // Every shard's table, in shard order; mutable: for a device copy of the store
  // (train/owned_shards.h) to write back what it trained.
  const std::vector<EmbeddingTable<float>>& shard_tables() const { return tables_; }
  std::vector<EmbeddingTable<float>>& mutable_shard_tables() { return tables_; }
  // Features whose table has a served shard here: what ApplyUpdate needs, in feature order.
  const std::vector<int32_t>& features() const { return served_.features; }
  // Features whose table has a pooled shard here, in feature order.
  const std::vector<int32_t>& pooled_features() const { return pooled_.features; }

  // out [n x shard width] = the rows of `ids` (table ids, inside the shard's rows), widened
  // to fp32 where the table's rows are 16-bit.
  // Throws kInvalidArgument / kOutOfRange naming the bad shard or id; writes nothing then.
  void Lookup(int32_t shard, const int64_t* ids, int64_t n, float* out) const;

  // Applies one step's sparse update of the served shards from the global batch
  // (batch_size samples): one FeatureUpdate per entry of features(), in that order.
  // Everything is validated before any row changes (sizes, id ranges, finite gradients and
  // weights), and every row's update is checked to leave it finite (else
  // kFailedPrecondition, nothing written).
  void ApplyUpdate(const std::vector<FeatureUpdate>& updates, int64_t batch_size, float lr,
                   int64_t step);
  // ApplyUpdate in two halves, for owners whose ranks agree on every update before any is
  // written: CheckUpdate validates (throwing as ApplyUpdate) and returns whether every
  // touched row's update would be finite, writing nothing; ApplyCheckedUpdate applies the
  // last checked update, with the same lr and step and nothing else done to the served
  // shards in between.
  bool CheckUpdate(const std::vector<FeatureUpdate>& updates, int64_t batch_size, float lr,
                   int64_t step);
  void ApplyCheckedUpdate(float lr, int64_t step);

  // The owner's own pooling, for trainers that own their shards (the Neo layout,
  // train/model_parallel_trainer.h): a local batch has one sparse feature per binding
  // (each feature of pooled_features() once per pooled shard of its table, in that order)
  // and table ids; its pooled row is pooled_width() wide, the bindings' columns side by
  // side. Every pooled shard must hold whole rows (kInvalidArgument naming the table
  // otherwise).
  int32_t pooled_width() const { return pooled_.bags->pooled_width(); }
  // The local batch's features as bindings to shards (table = shard index) and columns.
  const std::vector<FeatureBinding>& local_features() const { return pooled_.bags->features(); }
  // Checks a local batch (no dense features, no labels): kInvalidArgument / kOutOfRange
  // naming the field.
  ValidatedBatch ValidateLocalBatch(const BatchView& batch) const;
  // out [batch_size x pooled_width()] = the local batch's pooled vectors.
  void Pool(const ValidatedBatch& batch, float* out) const;
  // The fused backward + optimizer of d_pooled [batch_size x pooled_width()] over a local
  // batch, in two halves: whether every touched row's update would be finite (nothing
  // written), then the update, with the same batch and d_pooled and nothing else done to
  // the store in between. The bits of ApplyUpdate given the same bags and gradients.
  bool PooledUpdateIsFinite(const ValidatedBatch& batch, const float* d_pooled, float lr,
                            int64_t step);
  void ApplyPooledUpdate(const float* d_pooled, float lr, int64_t step);

  SparseOptimizer<float>& optimizer() { return *optimizer_; }

 private:
  struct LocalBatch;
  // One binding per (feature, shard of its table), features in order: the local batch
  // ApplyUpdate builds has one sparse "feature" per binding.
  struct Binding {
    int32_t feature_slot;  // index into the set's features
    int32_t shard;
  };
  // The shards of one role, bound to the features that read them.
  struct BagSet {
    std::vector<int32_t> features;
    std::vector<Binding> bindings;
    std::unique_ptr<EmbeddingBagCollection<float>> bags;
  };
  // The set of the shards for which takes(shard) holds.
  template <typename Takes>
  BagSet Bind(const Takes& takes);
  // kInvalidArgument naming the table unless every pooled shard holds whole rows.
  void RequireWholeRows(const char* what) const;
  void CheckFeatureUpdate(const FeatureUpdate& u, int64_t batch_size) const;
  // The owner's batch of this step's updates (what its bags' fused backward takes).
  void BuildLocalBatch(const std::vector<FeatureUpdate>& updates, int64_t batch_size, bool weighted,
                       LocalBatch* local) const;

  const config::ModelConfig model_;
  ThreadPool* pool_;
  std::vector<Shard> shards_;
  std::vector<EmbeddingTable<float>> tables_;  // one per shard
  std::vector<RowRange> row_ranges_;           // one per shard
  BagSet served_, pooled_;
  std::unique_ptr<LocalBatch> checked_;  // CheckUpdate's, for ApplyCheckedUpdate
  std::unique_ptr<SparseOptimizer<float>> optimizer_;
};

}  // namespace dlrm::ps

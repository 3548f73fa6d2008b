// A model's DYNAMIC tables (issue 14): per table, the DynamicRows that decide which raw
// ids hold one of its rows, and the translation of a batch's raw ids into those rows, so
// that everything below (pooling, the fused backward and sparse optimizers, a device
// backend) computes on row numbers exactly as for a FIXED table.
//
// A training step (ResolveForStep), per DYNAMIC table:
//  1. gathers the ids of the features that use it, in feature order, then batch order;
//  2. resolves them (DynamicRows::Resolve: touches, expires, evicts, admits, in a fixed
//     order, so the outcome is the same at every thread count);
//  3. initializes each admitted row: values drawn from (seed, table, id)
//     (EmbeddingTable::InitializeForIds) and the optimizer state reset (ResetRow);
//     evicted rows are dropped (the SSD tier will write them back);
//  4. rewrites the batch: each id becomes its row; an id without one is left out of its
//     bag (unadmitted ZERO) or becomes the table's last row (DEFAULT_ROW).
// Prediction (LookupRows) does steps 1 and 4 with the rows ids hold now and changes nothing.
// A step that fails after step 4 (diverged) is taken back whole by RollBackStep.
//
// Ownership: holds the DynamicRows; borrows the model and optimizer it is given per call.
// Threading: ResolveForStep, Restore and the mutating accessors under the caller's
// exclusive lock; LookupRows, Snapshot and stats are const and may run concurrently.
// Errors: Restore throws kDataLoss naming the table and leaves everything unchanged.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/config/dlrm.pb.h"
#include "engine/core/thread_pool.h"
#include "engine/data/batch.h"
#include "engine/embedding/dynamic_rows.h"
#include "engine/embedding/embedding_table.h"
#include "engine/embedding/sparse_optimizer.h"

namespace dlrm {

// A batch whose DYNAMIC features' ids were replaced by rows; batch() borrows from it and
// from the batch it was made from, so it is neither copied nor moved.
class RowBatch {
 public:
  RowBatch() = default;
  RowBatch(const RowBatch&) = delete;
  RowBatch& operator=(const RowBatch&) = delete;
  const ValidatedBatch& batch() const { return valid_; }

 private:
  friend class DynamicTables;
  std::vector<int32_t> lengths_;
  std::vector<int64_t> ids_;
  std::vector<float> weights_;
  ValidatedBatch valid_;
};

// What a table holds and did, for the C ABI's statistics (Engine::GetTableStats). A
// FIXED table reports its rows as capacity and size and counts nothing.
struct TableStats {
  bool dynamic = false;
  int64_t capacity = 0;  // rows ids may hold (a DYNAMIC table's num_rows less a default row)
  int64_t size = 0;      // rows held by ids now
  DynamicRowsStats counts;
  int64_t memory_bytes = 0;
};

class DynamicTables {
 public:
  // config must have passed ValidateConfig; one DynamicRows per DYNAMIC table.
  explicit DynamicTables(const config::DlrmConfig& config);
  DynamicTables(const DynamicTables&) = delete;
  DynamicTables& operator=(const DynamicTables&) = delete;

  bool empty() const { return tables_.empty(); }

  // Steps 1-4 above for the engine's step `step` (0-based, never decreasing). `batch` was
  // validated against the model; the result borrows from it and from this object until
  // the next call. tables and optimizer are the model's (rows [0, num_rows) each). Steps
  // 1-3 run for the tables in parallel on pool (null: here): each table's decisions
  // depend on its own ids only, so the split changes nothing.
  const ValidatedBatch& ResolveForStep(const ValidatedBatch& batch, int64_t step,
                                       std::vector<EmbeddingTable<float>>* tables,
                                       SparseOptimizer<float>* optimizer, ThreadPool* pool);
  // Takes the last ResolveForStep back when the step it served failed: the admitted rows'
  // values and optimizer state as they were, every table's DynamicRows as it was
  // (DynamicRows::Undo). Only right after ResolveForStep, with the same tables and
  // optimizer (an internal check).
  void RollBackStep(std::vector<EmbeddingTable<float>>* tables, SparseOptimizer<float>* optimizer);
  // Steps 1 and 4 with the rows the ids hold now, into *out (which the caller owns).
  void LookupRows(const ValidatedBatch& batch, RowBatch* out) const;

  // The model's table index of each DYNAMIC table, ascending.
  std::vector<int32_t> table_indices() const;
  // kNotFound unless table `table_index` is DYNAMIC.
  const DynamicRows& rows(int32_t table_index) const;
  // Replaces every table's state with `snapshots` (one per table_indices() entry), each
  // checked first (kDataLoss naming the table and the inconsistency). A table that fails
  // is unchanged but those before it are restored: restore into a fresh object (as the
  // Engine's load does, into a staged state) and drop it on error.
  void Restore(const std::vector<DynamicRowsSnapshot>& snapshots);

 private:
  struct Table {
    Table(const config::DlrmConfig& config, int32_t index);
    int32_t index;  // the model's table index
    std::string name;
    int64_t default_row;  // DEFAULT_ROW's row, or -1 (ZERO: left out)
    config::Initializer initializer;
    uint64_t seed;
    DynamicRows rows;
  };
  // The ids of the features of tables_[slot], feature order then batch order.
  void Gather(const ValidatedBatch& batch, size_t slot, std::vector<int64_t>* ids) const;
  // *out = batch with each DYNAMIC feature's ids replaced by rows[slot] in gather order.
  void Rewrite(const ValidatedBatch& batch, const std::vector<std::vector<int64_t>>& rows,
               RowBatch* out) const;
  void InitializeAdmitted(const Table& table, const RowChanges& changes,
                          std::vector<EmbeddingTable<float>>* tables,
                          SparseOptimizer<float>* optimizer) const;
  // What a step's admissions overwrote in one table: per admitted row its values, then
  // each optimizer state buffer's slice, for RollBackStep.
  struct Overwritten {
    std::vector<int64_t> rows;
    std::vector<float> values;
  };
  void SaveAdmitted(const Table& table, const RowChanges& changes,
                    std::vector<EmbeddingTable<float>>* tables, SparseOptimizer<float>* optimizer,
                    Overwritten* saved) const;

  std::vector<Table> tables_;
  std::vector<int32_t> slot_of_feature_;  // per sparse feature: its table's slot, or -1
  // Per slot, the last step's (reused): ids gathered, what changed, and (undo,
  // overwritten) how to take it back.
  struct SlotStep {
    std::vector<int64_t> gathered;
    RowChanges changes;
    DynamicRowsUndo undo;
    Overwritten overwritten;
  };
  std::vector<SlotStep> slot_steps_;
  std::vector<std::vector<int64_t>> step_rows_;  // per slot: the gathered ids' rows
  RowBatch step_batch_;
  bool can_roll_back_ = false;
};

}  // namespace dlrm

// A model's tables whose ids are not the rows they compute on (issue 14), and the
// translation of a batch's ids into those rows, so that everything below (pooling, the
// fused backward and sparse optimizers, a device backend) computes on row numbers exactly
// as for a FIXED table in memory:
//  - DYNAMIC tables: a DynamicRows decides which raw ids hold one of the table's rows;
//  - SSD tables (ssd storage, FIXED): a DynamicRows (LRU) decides which of the table's rows
//    hold one of its DRAM cache's slots, and an SsdTier (ssd_tier.h) moves rows between the
//    cache and the row store on disk, which this object owns (one per engine, in a
//    directory of its own under the config's ssd_dir).
//
// A training step (ResolveForStep), per such table:
//  1. gathers the ids of the features that use it, in feature order, then batch order;
//  2. resolves them (DynamicRows::Resolve: touches, expires, evicts, admits, in a fixed
//     order, so the outcome is the same at every thread count);
//  3. DYNAMIC: initializes each admitted row (values drawn from (seed, table, id),
//     EmbeddingTable::InitializeForIds; the optimizer state reset by ResetRow); evicted rows
//     are dropped. SSD: every id must have a slot (else kResourceExhausted naming the table
//     and its cache_bytes, and nothing changes); evicted slots are written back, admitted
//     ones filled (SsdTier);
//  4. rewrites the batch: each id becomes its row; an id without one is left out of its
//     bag (unadmitted ZERO) or becomes the table's last row (DEFAULT_ROW).
// Prediction with DYNAMIC tables only (LookupRows) does steps 1 and 4 with the rows ids
// hold now and changes nothing; with SSD tables (ResolveForPredict) it brings the rows it
// needs into the caches as a step does, but admits no DYNAMIC id.
// A step that fails after step 4 (diverged) is taken back whole by RollBackStep.
//
// Ownership: holds the DynamicRows, the SSD tiers and their row store; borrows the model
// and optimizer it is given per call.
// Threading: ResolveForStep, ResolveForPredict, Flush, Restore and RestoreStore one at a
// time, under the caller's exclusive locks; LookupRows, ReadSsdRows, snapshots and stats
// are const and may run concurrently with each other.
// Errors: Restore throws kDataLoss naming the table and leaves everything unchanged; the
// row store's kIo and kDataLoss fail a step having changed nothing.
#pragma once

#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "engine/config/dlrm.pb.h"
#include "engine/core/scratch_dir.h"
#include "engine/core/thread_pool.h"
#include "engine/data/batch.h"
#include "engine/embedding/dynamic_rows.h"
#include "engine/embedding/embedding_table.h"
#include "engine/embedding/row_store.h"
#include "engine/embedding/sparse_optimizer.h"
#include "engine/model/ssd_tier.h"

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

// Rows of one table whose values and optimizer state in the host copy a step's resolve
// rewrote (its admissions), in admission order.
struct ChangedRows {
  int32_t table = 0;                           // the model's table index
  const std::vector<int64_t>* rows = nullptr;  // borrowed from the DynamicTables
};

// Makes rows of the host copy current before they are read: a device backend's PullRows
// (train/backend.h), for an SSD table's evicted rows before their write-back. May be
// called for different tables at once.
using RowRefresh = std::function<void(const ChangedRows&)>;

class DynamicTables {
 public:
  // config must have passed ValidateConfig; one DynamicRows per DYNAMIC or SSD table, and
  // with SSD tables a fresh row store under config.ssd_dir (kIo naming it when it cannot
  // be made).
  explicit DynamicTables(const config::DlrmConfig& config);
  ~DynamicTables();
  DynamicTables(const DynamicTables&) = delete;
  DynamicTables& operator=(const DynamicTables&) = delete;

  bool empty() const { return tables_.empty(); }
  bool has_ssd() const { return store_ != nullptr; }

  // Steps 1-4 above for the engine's step `step` (0-based, never decreasing). `batch` was
  // validated against the model; the result borrows from it and from this object until
  // the next call. tables and optimizer are the model's (rows [0, num_rows) each). Steps
  // 1-3 run for the tables in parallel on pool (null: here): each table's decisions
  // depend on its own ids only, so the split changes nothing.
  // `refresh` (null: the host copy is current) is called before evicted rows are read.
  const ValidatedBatch& ResolveForStep(const ValidatedBatch& batch, int64_t step,
                                       std::vector<EmbeddingTable<float>>* tables,
                                       SparseOptimizer<float>* optimizer, ThreadPool* pool,
                                       const RowRefresh& refresh = nullptr);
  // Takes the last ResolveForStep back when the step it served failed: the admitted rows'
  // values and optimizer state as they were, every table's DynamicRows as it was
  // (DynamicRows::Undo). Only right after ResolveForStep, with the same tables and
  // optimizer (an internal check).
  void RollBackStep(std::vector<EmbeddingTable<float>>* tables, SparseOptimizer<float>* optimizer);
  // The rows the last ResolveForStep or ResolveForPredict rewrote (admissions, an SSD
  // table's filled slots), per table that has any, also where it threw (a prediction's
  // tables before the one that failed keep their moves): what a device copy of the
  // tables must take in (train/backend.h); borrowed until the next resolve.
  std::vector<ChangedRows> ChangedByLastResolve() const;
  // Steps 1 and 4 with the rows the ids hold now, into *out (which the caller owns). Not
  // with SSD tables (has_ssd()), whose rows may not be in their caches: ResolveForPredict.
  void LookupRows(const ValidatedBatch& batch, RowBatch* out) const;
  // Prediction's translation with SSD tables: as LookupRows for DYNAMIC tables; the SSD
  // tables' rows are brought into their caches (steps 2 and 3 of a step at `step`).
  void ResolveForPredict(const ValidatedBatch& batch, int64_t step,
                         std::vector<EmbeddingTable<float>>* tables,
                         SparseOptimizer<float>* optimizer, RowBatch* out,
                         const RowRefresh& refresh = nullptr);

  // The SSD tables' prefetch stage, after ResolveForStep: reads the rows `next` (the batch
  // expected to train next) needs from the stores on a thread of its own, while this step
  // computes; the next resolve takes them instead of reading (SsdTier::RowsToReadAhead).
  // Every other call waits for it first. DropReadAhead: after a failed step.
  void ReadAheadForNext(const ValidatedBatch& next);
  void DropReadAhead();

  // The model's table index of each DYNAMIC table, ascending.
  std::vector<int32_t> table_indices() const;
  // The model's table index of each SSD table, ascending.
  std::vector<int32_t> ssd_table_indices() const;
  // Per model table (of num_tables), the table row each slot of an SSD table's cache
  // holds, what a 16-bit slot's stochastic rounding is keyed by (KeyRoundingBy); null for
  // the other tables. Current after every resolve and rollback (both write the keys in
  // place, and Restore leaves SSD tables alone: the pointers stay valid).
  std::vector<const int64_t*> CacheRowKeys(size_t num_tables) const;
  // A DYNAMIC table's ids, or an SSD table's cache; kNotFound for other tables.
  const DynamicRows& rows(int32_t table_index) const;
  // An SSD table's tier; kNotFound for other tables.
  const SsdTier& ssd(int32_t table_index) const;

  // SSD tables: writes every changed cached row to the store, then copies the store to
  // `dir` (which must not exist; RowStore::CopyTo). What a checkpoint saves.
  void FlushAndCopyStore(const std::string& dir, std::vector<EmbeddingTable<float>>* tables,
                         SparseOptimizer<float>* optimizer);
  // Replaces the row store with a copy of the one at `dir` (FlushAndCopyStore's), and each
  // SSD table's stored-rows bitmap with stored[i] (ssd_table_indices() order); the caches
  // must be empty (a fresh object). kDataLoss naming what is wrong; unchanged then.
  void RestoreStore(const std::string& dir, std::vector<std::vector<uint64_t>> stored);
  // Rows [first, first + n) of SSD table `table_index` (SsdTier::ReadRows).
  void ReadSsdRows(int32_t table_index, const std::vector<EmbeddingTable<float>>& tables,
                   int64_t first, int64_t n, float* out) const;
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
    std::unique_ptr<SsdTier> ssd;  // SSD tables only
    // An SSD table's cache counts its own steps, one per Resolve (a prediction's too), so
    // that the rows of one prediction never hold their slots against the next one.
    int64_t cache_clock = 0;
    int64_t StepFor(int64_t step) { return ssd ? cache_clock++ : step; }
  };
  // Steps 2 and 3 for one table; for an SSD table, nothing changes when it throws.
  void ResolveTable(size_t slot, int64_t step, std::vector<EmbeddingTable<float>>* tables,
                    SparseOptimizer<float>* optimizer, const RowRefresh& refresh);
  // An SSD table's step 3 after its Resolve: the Resolve is undone when it throws.
  void MoveSsdRows(size_t slot, std::vector<EmbeddingTable<float>>* tables,
                   SparseOptimizer<float>* optimizer, const RowRefresh& refresh);
  // Takes one table's ResolveTable back.
  void RollBackSlot(size_t slot, std::vector<EmbeddingTable<float>>* tables,
                    SparseOptimizer<float>* optimizer);
  size_t SlotOf(int32_t table_index) const;
  // Empties what ChangedByLastResolve lists: a resolve that fails part way lists only what
  // it changed.
  void ForgetChanges();
  // Waits for the prefetch stage; a failed one leaves nothing (its Fill reads itself).
  void WaitForReadAhead();
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

  // The SSD tables' store, in a directory of this object's own (declared first: it outlives
  // the tiers that point to it).
  std::unique_ptr<ScratchDir> store_dir_;
  std::unique_ptr<RowStore> store_;
  RowStoreOptions store_options_;  // store_'s
  std::vector<Table> tables_;
  std::vector<int32_t> slot_of_feature_;  // per sparse feature: its table's slot, or -1
  // Per slot, the last step's (reused): ids gathered, what changed, and (undo,
  // overwritten) how to take it back.
  struct SlotStep {
    std::vector<int64_t> gathered;
    RowChanges changes;
    DynamicRowsUndo undo;
    Overwritten overwritten;
    std::vector<uint8_t> dirty_before;  // an SSD table's: SsdTier::MarkDirty's
  };
  std::vector<SlotStep> slot_steps_;
  std::vector<std::vector<int64_t>> step_rows_;  // per slot: the gathered ids' rows
  RowBatch step_batch_;
  bool can_roll_back_ = false;
  std::future<void> read_ahead_;  // the prefetch stage in flight (declared last: joined first)
};

}  // namespace dlrm

// One SSD table (issue 14's SSD tier): every row of a FIXED table lives in a RowStore on
// disk, and the rows a step uses in a DRAM cache: the model's EmbeddingTable of the table,
// of ResidentRows rows (slots), whose slots a DynamicRows (LRU, SsdCacheOptionsFor) gives
// to rows. DynamicTables resolves a batch's row numbers to slots as it resolves a DYNAMIC
// table's ids; this class moves rows between the cache and the store:
//  - WriteBack: the slots the cache evicted go to the store, if they changed since they
//    came in (dirty), as their weights then their optimizer state (one atomic write);
//  - Fill: the slots it admitted get their row from the store when it was ever written
//    there, else the row's initial values (EmbeddingTable::InitializeRows) and a reset
//    optimizer state, as the DRAM table starts;
//  - MarkDirty: the slots a training step uses are about to change.
// So every row is, in the cache or on disk, what the same training would have made of it
// in a DRAM table: the math never sees the tier (bitwise, tested against DRAM).
//
// Ownership: borrows the store (DynamicTables owns it), the cache and the optimizer.
// Threading: one call at a time per table; different tables' may run concurrently (the
// store takes concurrent calls).
// Errors: the store's kIo or kDataLoss, prefixed with the table's name. A failed WriteBack
// or Fill changes neither the cache nor what this object knows of the store.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/config/dlrm.pb.h"
#include "engine/core/status.h"
#include "engine/embedding/dynamic_rows.h"
#include "engine/embedding/embedding_table.h"
#include "engine/embedding/packed_row.h"
#include "engine/embedding/row_store.h"
#include "engine/embedding/sparse_optimizer.h"

namespace dlrm {

// Floats per stored row of SSD table `table_index`: its packed weights (packed_row.h), then
// its optimizer state.
int64_t SsdRowWidth(const config::DlrmConfig& config, int32_t table_index);

class SsdTier {
 public:
  // Table `table_index` of config, which has ssd storage; rows go to *store.
  SsdTier(const config::DlrmConfig& config, int32_t table_index, RowStore* store);

  void WriteBack(const RowChanges& changes, EmbeddingTable<float>* cache,
                 SparseOptimizer<float>* optimizer);
  void Fill(const RowChanges& changes, EmbeddingTable<float>* cache,
            SparseOptimizer<float>* optimizer);
  // *before (resized to slots) receives each slot's mark as it was, for RestoreDirty.
  void MarkDirty(const std::vector<int64_t>& slots, std::vector<uint8_t>* before);
  // The marks of MarkDirty(slots, &before) put back: a step taken back leaves unchanged
  // slots as clean as they were (a checkpoint then writes no row the step did not change).
  void RestoreDirty(const std::vector<int64_t>& slots, const std::vector<uint8_t>& before);

  // The prefetch stage: of `rows` (the next step's), those that are neither cached in
  // `map` nor never written, to be read from the store by ReadAhead (which may run on
  // another thread: it reads only the store and its own buffers) and used by the next
  // Fill. Valid until that Fill: rows neither cached nor dirty are written by nothing in
  // between. A Fill without a ReadAhead since the last one reads everything itself.
  std::vector<int64_t> RowsToReadAhead(const DynamicRows& map, std::vector<int64_t> rows) const;
  void ReadAhead(std::vector<int64_t> rows);
  void DropReadAhead() { ahead_rows_.clear(); }
  int64_t rows_read_ahead() const { return rows_read_ahead_; }  // used by Fills, in all
  // Writes every dirty slot to the store (before a checkpoint copies it).
  void Flush(const DynamicRows& map, EmbeddingTable<float>* cache,
             SparseOptimizer<float>* optimizer);
  // The weights of rows [first, first + n) into out[n x dim]: a cached row's from the
  // cache, a stored row's from the store, any other's initial values.
  void ReadRows(const DynamicRows& map, const EmbeddingTable<float>& cache, int64_t first,
                int64_t n, float* out) const;

  // Which rows were ever written to the store, one bit per row (for checkpoints).
  const std::vector<uint64_t>& stored_words() const { return stored_; }
  // kDataLoss unless words has one bit per row of the table; unchanged then.
  void RestoreStored(std::vector<uint64_t> words);
  void RepointStore(RowStore* store) { store_ = store; }
  int64_t full_rows() const { return full_rows_; }

 private:
  bool stored(int64_t row) const {
    return (stored_[static_cast<size_t>(row) >> 6] >> (row & 63)) & 1;
  }
  void MarkStored(int64_t row) {
    stored_[static_cast<size_t>(row) >> 6] |= uint64_t{1} << (row & 63);
  }
  // Floats per stored row (embedding/packed_row.h), checked against the config's.
  int64_t Width(const StateBufferList& state, const EmbeddingTable<float>& cache) const;
  // Writes (row, slot) pairs' rows to the store, marks them stored and clean.
  void WriteRows(const std::vector<std::pair<int64_t, int64_t>>& row_slots,
                 EmbeddingTable<float>* cache, SparseOptimizer<float>* optimizer);
  // Fill's reads, (row, slot) pairs: from the prefetch stage's rows where it has them,
  // else from the store, into values[read x width_].
  void ReadStoredOrAhead(const std::vector<std::pair<int64_t, int64_t>>& read, float* values);
  // Stored rows (each must be there: kDataLoss otherwise) into values[rows x width_].
  void ReadStored(const std::vector<int64_t>& rows, float* values) const;
  // kIo/kDataLoss from the store, named for this table.
  [[noreturn]] void Rethrow(const Error& e) const;

  RowStore* store_;
  int32_t table_index_;
  std::string name_;
  config::Initializer initializer_;
  uint64_t seed_;
  int64_t full_rows_;
  int32_t dim_;
  int64_t width_;                 // floats per stored row: weights, then optimizer state
  std::vector<uint64_t> stored_;  // a bit per row of the table
  std::vector<uint8_t> dirty_;    // per slot
  // Reused per call.
  std::vector<int64_t> ids_;
  std::vector<float> packed_;
  // The prefetch stage's rows (ascending) and their stored values, for the next Fill.
  std::vector<int64_t> ahead_rows_;
  std::vector<float> ahead_values_;
  int64_t rows_read_ahead_ = 0;
};

}  // namespace dlrm

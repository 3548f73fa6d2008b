// One embedding table held as a dense [num_rows x dim] array in host memory: a FIXED
// table's rows, or the rows a DYNAMIC table hands to ids (dynamic_rows.h decides which).
// (An SSD table's DRAM cache is one too: model/ssd_tier.h decides which rows it holds.)
// A table of precision BF16 or FP16 holds its rows as 16-bit floats (half_row.h) in
// halves() instead of data(): the pooled forward widens them, training reads a row with
// ReadRow and stores the updated one with StoreRow. A table of precision INT8 or INT4
// holds its rows as row-wise quantized codes (quantized_row.h) in codes(): read-only
// rows for prediction, which only the pooled forward (embedding_bag.h), ReadRow and the
// serving export read.
// Threading: none of its own; rows are plain memory the caller partitions.
// Errors: kInvalidArgument naming the table for a bad shape or initializer.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "engine/config/dlrm.pb.h"
#include "engine/core/thread_pool.h"
#include "engine/embedding/half_row.h"
#include "engine/embedding/quantized_row.h"

namespace dlrm {

template <typename T>
class EmbeddingTable {
 public:
  // rounding: how StoreRow narrows a BF16 / FP16 table's rows (ignored for the others).
  EmbeddingTable(std::string name, int64_t num_rows, int32_t dim,
                 TablePrecision precision = config::TableConfig::FP32,
                 TableRounding rounding = config::TableConfig::NEAREST);

  // Row r gets values drawn from CounterRng(seed, kStreamEmbeddingBase + table_index, r):
  // independent of thread count, sharding and the order rows are touched. DEFAULT is
  // uniform(-1/sqrt(num_rows), 1/sqrt(num_rows)) as the DLRM reference. A BF16 / FP16
  // table stores them rounded to nearest, and (seed, table_index) becomes the key of its
  // stochastic rounding.
  void Initialize(const config::Initializer& init, uint64_t seed, int32_t table_index);

  // For a shard of a larger table: this object holds rows [row_begin, row_begin +
  // num_rows()) x columns [col_begin, col_begin + dim()) of table `table_index`, which has
  // full_rows rows. Every value equals the full table's at the same (row, column), so a
  // sharded model starts from exactly the single-process weights; a BF16 / FP16 shard's
  // stochastic rounding draws the full table's bits for the same (row, column) too.
  void InitializeShard(const config::Initializer& init, uint64_t seed, int32_t table_index,
                       int64_t full_rows, int64_t row_begin, int32_t col_begin);

  // (A quantized table's rows get those values quantized.)

  // A DYNAMIC table's admitted rows: row r of each (id, r) gets the values drawn from
  // (seed, table_index, id) (a stream of its own, not a FIXED row's; BF16 / FP16 rows
  // store them rounded to nearest), so an id starts from the same values whichever row it
  // lands in and whenever it is admitted again. The initializer must have passed
  // Initialize's checks; rows must be in [0, num_rows()).
  void InitializeForIds(const config::Initializer& init, uint64_t seed, int32_t table_index,
                        const std::vector<std::pair<int64_t, int64_t>>& id_rows);

  // An SSD table's cache (issue 14): slot s of each (row, s) gets the values Initialize
  // gives row `row` of the full table of full_rows rows (16-bit rows rounded to nearest as
  // there), so a row first used in the cache starts exactly as in a table held whole in
  // memory. The initializer must have passed
  // Initialize's checks; slots must be in [0, num_rows()).
  void InitializeRows(const config::Initializer& init, uint64_t seed, int32_t table_index,
                      int64_t full_rows, const std::vector<std::pair<int64_t, int64_t>>& row_slots);
  const std::string& name() const { return name_; }
  int64_t num_rows() const { return num_rows_; }
  int32_t dim() const { return dim_; }
  TablePrecision precision() const { return precision_; }
  bool quantized() const { return IsQuantized(precision_); }
  bool half() const { return IsHalf(precision_); }
  const HalfRounding& rounding() const { return rounding_; }
  // Bytes of one stored row, and of all of them.
  int64_t row_bytes() const { return StoredRowBytes(precision_, dim_); }
  int64_t memory_bytes() const { return num_rows_ * row_bytes(); }
  // A quantized table's rows, num_rows() x row_bytes() (empty for FP32; data() is empty
  // for a quantized table).
  std::vector<uint8_t>& codes() { return codes_; }
  const std::vector<uint8_t>& codes() const { return codes_; }
  const uint8_t* code_row(int64_t r) const { return codes_.data() + r * row_bytes(); }
  // A BF16 / FP16 table's rows, num_rows() x dim() (empty for the other precisions).
  std::vector<uint16_t>& halves() { return halves_; }
  const std::vector<uint16_t>& halves() const { return halves_; }
  uint16_t* half_row(int64_t r) { return halves_.data() + r * dim_; }
  const uint16_t* half_row(int64_t r) const { return halves_.data() + r * dim_; }
  // Where row r is stored, whatever the precision (row(), half_row() or code_row()).
  const void* row_address(int64_t r) const {
    if (quantized()) return code_row(r);
    if (half()) return half_row(r);
    return row(r);
  }
  // out[0, dim) = row r's values, whatever the precision.
  void ReadRow(int64_t r, T* out) const;
  // Row r = values[0, dim): copied (FP32), or narrowed as rounding() says with the random
  // bits of (step, r) (BF16 / FP16): an update's store. Not for a quantized table.
  void StoreRow(int64_t r, const T* values, int64_t step);
  // Row r = values[0, dim) copied, or narrowed to nearest: a write (initial values, a
  // parameter written from outside, a saved row put back), not an update; exact for what
  // ReadRow gave. Not for a quantized table.
  void WriteRow(int64_t r, const T* values);
  // The key of the stochastic rounding's bits: the engine's seed and model table
  // `table_index` (Initialize and InitializeShard set it; an SSD table's cache, whose rows
  // come in later, is given it when made).
  void SetRoundingKey(uint64_t seed, int32_t table_index) {
    rounding_.seed = seed;
    rounding_.table = table_index;
  }
  // For an SSD table's cache: slot s's stochastic rounding draws the bits of table row
  // rows[s] (the row it holds), not of row s, so the cache rounds as the whole table
  // would. rows must outlive the next StoreRow; null: each row draws its own bits.
  void KeyRoundingBy(const int64_t* rows) { rounding_rows_ = rows; }
  const int64_t* rounding_rows() const { return rounding_rows_; }
  // Exchanges the stored rows (whatever the precision) with other's, a table of the same
  // shape and precision: a load staged in a fresh table commits by one swap. The names and
  // rounding keys stay where they were.
  void SwapRows(EmbeddingTable* other);
  T* row(int64_t r) { return data_.data() + r * dim_; }
  const T* row(int64_t r) const { return data_.data() + r * dim_; }
  std::vector<T>& data() { return data_; }
  const std::vector<T>& data() const { return data_; }

 private:
  std::string name_;
  int64_t num_rows_;
  int32_t dim_;
  // storage sized to count elements, huge pages asked for before the zero-fill.
  template <typename E>
  static void Allocate(std::vector<E>* storage, size_t count);

  TablePrecision precision_;
  HalfRounding rounding_;
  const int64_t* rounding_rows_ = nullptr;  // KeyRoundingBy's
  std::vector<T> data_;
  std::vector<uint8_t> codes_;
  std::vector<uint16_t> halves_;
};

// Tables [0, n), table i built (allocated and initialized) by make(i), one task each on
// pool: zero-filling and drawing gigabytes of rows is most of a start-up, and each value
// is a pure function of (seed, table, row, column), so the split changes nothing.
template <typename T, typename Make>
std::vector<EmbeddingTable<T>> BuildTables(int64_t n, ThreadPool* pool, Make make) {
  std::vector<std::optional<EmbeddingTable<T>>> built(static_cast<size_t>(n));
  ParallelFor(pool, n, [&](int64_t i) { built[i].emplace(make(i)); });
  std::vector<EmbeddingTable<T>> tables;
  tables.reserve(built.size());
  for (auto& table : built) tables.push_back(std::move(*table));
  return tables;
}

}  // namespace dlrm

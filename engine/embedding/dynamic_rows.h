// Which ids of a dynamic embedding table hold a row, step by step (issue 14): the id index
// (id_index.h) plus the policy that admits new ids and evicts resident ones, as TorchRec's
// managed-collision tables, HierarchicalKV and Monolith do, but deterministic: the same
// batches give the same rows, admissions and evictions in every run, whatever the thread
// count, because every decision is taken in a fixed order.
//
// A step (Resolve) takes the step's ids in batch order and:
//  1. counts each distinct id's occurrences, in ascending id order;
//  2. touches the resident ones (hits): last step = this step, count += occurrences, and
//     moves them to the recent end of the LRU order, in ascending id order;
//  3. TTL: evicts rows untouched for more than ttl_steps steps;
//  4. admission: a new id gets a row once it has occurred min_count times in all (this
//     step's occurrences included), counted in a count-min sketch (4 rows of
//     sketch_width counters: never under the true count, so at worst an id is admitted
//     early; Monolith's counting filter does the same), and, with admit_probability p < 1,
//     wins a draw of probability 1 - (1 - p)^occurrences keyed by (id, step);
//  5. when there are fewer free rows than ids to admit, evicts resident rows this step
//     did not touch: LRU and TTL the least recently used first (the LRU order: by last
//     step, then as step 2 and admissions append them); LFU the smallest (count, last
//     step, id) first, at least capacity / 64 rows at a time so that the scan it needs is
//     paid rarely;
//  6. admits the new ids in ascending id order while rows are free (the rest stay out this
//     step and are counted as rejected), appending them to the LRU order.
// The caller learns the (id, row) pairs admitted (rows to initialize from the id: Philox
// keyed by the id gives a row the same first value wherever it lands) and evicted (rows
// to write back, for a tier below).
//
// Memory: the index, five int64 per row of metadata, and the sketch when min_count > 1;
// nothing is allocated per id. Threading: one Resolve at a time; const accessors may run
// concurrently with each other. Errors: kInvalidArgument naming the option or the step
// (steps must not go back); a failed Resolve changes nothing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "engine/config/dlrm.pb.h"
#include "engine/embedding/id_index.h"

namespace dlrm {

struct DynamicRowsOptions {
  enum class Eviction { kLru, kLfu, kTtl };
  int64_t capacity = 0;  // rows, in [1, IdIndex::kMaxCapacity]
  Eviction eviction = Eviction::kLru;
  int64_t ttl_steps = 0;                    // kTtl: >= 1
  int64_t min_count = 1;                    // >= 1; 1 admits an id at its first occurrence
  int64_t sketch_width = int64_t{1} << 20;  // a power of two in [64, 2^30], for min_count > 1
  // In (0, 1]: below 1, an id that qualifies by count is admitted at a step with
  // probability 1 - (1 - p)^occurrences, drawn from (admission_key, id, step).
  double admit_probability = 1.0;
  uint64_t admission_key = 0;
};

// The options of a DYNAMIC table's config (checked by ValidateConfig): capacity is its
// num_rows, less the shared default row with unadmitted DEFAULT_ROW; the admission draws
// are keyed by (seed, table_index).
DynamicRowsOptions DynamicRowsOptionsFor(const config::TableConfig& table, uint64_t seed,
                                         int32_t table_index);

// The options of an SSD table's DRAM cache (issue 14): which of the table's rows hold one
// of its cache_rows slots. LRU, and a row is admitted at its first use.
DynamicRowsOptions SsdCacheOptionsFor(int64_t cache_rows);

// Rows table `table_index` of config holds in host memory: its num_rows, or for an SSD
// table its cache's slots: as many as fit ssd.cache_bytes with their weights, optimizer
// state and the cache's own index (a DynamicRows of SsdCacheOptionsFor), in
// [1, num_rows].
int64_t ResidentRows(const config::DlrmConfig& config, int table_index);
// Rows of table `table_index` that carry sparse optimizer state: its ResidentRows, or none
// for a quantized (INT8 / INT4, read-only serving) table, which no update reaches.
int64_t StateRows(const config::DlrmConfig& config, int table_index);
// The bytes the cache of `rows` slots of table `table_index` of config takes (its rows'
// weights at the table's precision, config's optimizer state, the cache's index): the
// ssd.cache_bytes that gives exactly `rows` slots.
int64_t SsdCacheBytes(const config::DlrmConfig& config, int table_index, int64_t rows);

struct DynamicRowsStats {
  int64_t lookups = 0;   // id occurrences resolved
  int64_t hits = 0;      // of those, of resident ids
  int64_t admitted = 0;  // ids given a row
  int64_t evicted = 0;   // ids that lost their row (TTL or for space)
  int64_t rejected = 0;  // distinct new ids of a step that qualified but found no row
};

// The whole state of a DynamicRows, for checkpoints: restored into a table of the same
// options, it makes the decisions the original would have made, bit for bit.
struct DynamicRowsSnapshot {
  // The resident ids, least recently used first, with their rows, last steps and counts.
  std::vector<int64_t> ids, rows, last_steps, counts;
  std::vector<int64_t> freed_rows;  // IdIndex's free-row state
  int64_t next_unused_row = 0;
  std::vector<uint32_t> sketch;  // empty when min_count is 1
  int64_t last_resolved_step = 0;
  DynamicRowsStats stats;
};

// What a step changed: (id, row) pairs, each list in the order it happened.
struct RowChanges {
  std::vector<std::pair<int64_t, int64_t>> evicted;   // freed rows (write back)
  std::vector<std::pair<int64_t, int64_t>> admitted;  // rows to initialize for their id
};

// What one Resolve changed, recorded when asked for, so that Undo can take the step back
// (the engine's step failed after its ids were resolved): the state before each change.
struct DynamicRowsUndo {
  struct Moved {  // a touched row, or an evicted one: where it sat in the LRU order
    int64_t id, row, last_step, count, prev;
  };
  struct Admitted {
    int64_t id, row;
    bool from_unused;  // the row had never been used (else: popped from the freed stack)
  };
  int64_t last_resolved_step = 0;
  DynamicRowsStats stats;
  std::vector<Moved> touched, evicted;  // in the order they happened
  std::vector<Admitted> admitted;
  std::vector<std::pair<size_t, uint32_t>> sketch;  // (counter, old value)
  void Clear();
};

class DynamicRows {
 public:
  static constexpr int64_t kNoRow = IdIndex::kNotFound;

  explicit DynamicRows(const DynamicRowsOptions& options);

  // Resolves a step's ids (batch order): rows[i] is ids[i]'s row this step, or kNoRow for
  // an id that has none (not admitted yet, or no room). *changes is overwritten. `step`
  // must be >= 0 and >= the last step resolved. With `undo`, records there how to take
  // this Resolve back.
  void Resolve(const int64_t* ids, int64_t n, int64_t step, int64_t* rows, RowChanges* changes,
               DynamicRowsUndo* undo = nullptr);
  // Takes back the Resolve that recorded `undo`, the last one: the state is again exactly
  // what it was before it (what Snapshot shows, and every later decision).
  void Undo(const DynamicRowsUndo& undo);

  DynamicRowsSnapshot Snapshot() const;
  // The state of a table of `options` holding only ids[i] -> rows[i] (least recently used
  // first), with nothing counted: a serving model's. kDataLoss naming the first row outside
  // [0, capacity) or given twice; Restore checks the rest.
  static DynamicRowsSnapshot ResidentSnapshot(const DynamicRowsOptions& options,
                                              std::vector<int64_t> ids, std::vector<int64_t> rows);
  // Replaces the state with `snapshot`'s. Checks it first: kDataLoss naming the first
  // inconsistency (IdIndex::Restore's, a sketch of another size, a count below 1, a last
  // step after the last step resolved or out of recency order); unchanged then.
  void Restore(const DynamicRowsSnapshot& snapshot);

  const DynamicRowsOptions& options() const { return options_; }
  const DynamicRowsStats& stats() const { return stats_; }
  const IdIndex& index() const { return index_; }
  int64_t size() const { return index_.size(); }
  size_t memory_bytes() const;
  // What a DynamicRows of these options takes when full (before it is made).
  static size_t MemoryBytesFor(const DynamicRowsOptions& options);
  // A resident row's last step and occurrence count.
  int64_t last_step(int64_t row) const { return last_step_[static_cast<size_t>(row)]; }
  int64_t count(int64_t row) const { return count_[static_cast<size_t>(row)]; }
  // The id each row holds, indexed by row (a row holding none has a stale value). Valid
  // until the next call that changes the rows (Resolve, Restore, Undo).
  const int64_t* ids_of_rows() const { return id_of_row_.data(); }
  // fn(id, row) for every resident id, least recently used first.
  template <typename Fn>
  void ForEachByRecency(Fn fn) const {
    for (int64_t r = next_[Head()]; r != Head(); r = next_[static_cast<size_t>(r)])
      fn(id_of_row_[static_cast<size_t>(r)], r);
  }

 private:
  using Distinct = std::vector<std::pair<int64_t, int64_t>>;  // (id, occurrences)
  int64_t Head() const { return index_.capacity(); }          // the LRU list's sentinel
  void Distinguish(const int64_t* ids, int64_t n);
  // Steps 2-4: touches hits; fills to_admit_ with the new ids that qualify.
  void TouchAndCount(int64_t step);
  // Software prefetch of a resident row's metadata, and of its LRU neighbours' links.
  void PrefetchRow(int64_t row) const;
  void PrefetchNeighbours(int64_t row) const;
  void ExpireTtl(int64_t step, RowChanges* changes);
  void EvictForSpace(int64_t needed, int64_t step, RowChanges* changes);
  void EvictLfu(int64_t needed, int64_t step, RowChanges* changes);
  void Evict(int64_t row, RowChanges* changes);
  void Admit(int64_t step, RowChanges* changes);
  // Adds `occurrences` to the id's sketch counters; returns its estimated total.
  int64_t CountInSketch(int64_t id, int64_t occurrences);
  // Whether a new id that occurs `occurrences` times this step qualifies for a row.
  bool Qualifies(int64_t id, int64_t occurrences, int64_t step);
  void Unlink(int64_t row);
  void Append(int64_t row);
  void InsertAfter(int64_t prev, int64_t row);
  void CheckSnapshot(const DynamicRowsSnapshot& snapshot) const;
  // Exchanges the state (not the options, which are the same) with `other`.
  void Swap(DynamicRows& other);

  const DynamicRowsOptions options_;
  IdIndex index_;
  DynamicRowsStats stats_;
  // Per row, and the LRU list (a ring through the sentinel Head()).
  std::vector<int64_t> last_step_, count_, id_of_row_, prev_, next_;
  std::vector<uint32_t> sketch_;    // [4 x sketch_width], saturating
  int64_t last_resolved_step_ = 0;  // steps start at 0 or later
  // Per step, reused.
  Distinct distinct_;
  std::vector<int64_t> sorted_;
  std::vector<int64_t> scratch_;     // Distinguish's radix sort's
  std::vector<int64_t> found_;       // the distinct ids' rows (TouchAndCount)
  Distinct to_admit_;                // (id, occurrences)
  DynamicRowsUndo* undo_ = nullptr;  // during a Resolve that records
};

}  // namespace dlrm

// Optimizers for embedding rows, applied only to rows touched in a step, from inside the
// embedding backward (fused: the summed row gradient is used as soon as it is complete
// and never stored for the whole table).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/config/dlrm.pb.h"

namespace dlrm {

template <typename T>
class SparseOptimizer {
 public:
  virtual ~SparseOptimizer() = default;
  // Applies the update for one row with its summed gradient grad[dim]. Called at most once
  // per (table, row) per step; calls for different rows may run concurrently.
  // step is the 1-based global step count (Adam bias correction).
  virtual void UpdateRow(int32_t table, int64_t row, T* weights, const T* grad, int32_t dim,
                         float lr, int64_t step) = 0;
  // Whether UpdateRow with these arguments would leave the row's weights and state finite:
  // the same arithmetic, nothing written. May run concurrently with other RowUpdateIsFinite
  // calls (not with UpdateRow).
  virtual bool RowUpdateIsFinite(int32_t table, int64_t row, const T* weights, const T* grad,
                                 int32_t dim, float lr, int64_t step) const = 0;
  // Whether rows have optimizer state (all but SGD): only then is PrefetchState worth a call.
  virtual bool HasRowState() const = 0;
  // Asks the memory system for (table, row)'s state ahead of its UpdateRow (the embedding
  // backward calls it a few rows early, beside the row's own prefetch). A hint only: it
  // reads nothing. table and row are valid.
  virtual void PrefetchState(int32_t table, int64_t row) const = 0;
  // Returns (table, row)'s state to its initial value, as a fresh optimizer holds it: a
  // DYNAMIC table's row handed to another id starts over. table and row are valid.
  virtual void ResetRow(int32_t table, int64_t row) = 0;
  // Named state of one table for checkpoints: SGD none; Adagrad "sum_sq" [rows x dim];
  // row-wise Adagrad "row_sum_sq" [rows]; Adam "exp_avg", "exp_avg_sq" [rows x dim].
  virtual std::vector<std::pair<std::string, std::vector<T>*>> StateBuffers(int32_t table) = 0;
};

// The name of row-wise Adagrad's state, the only state with one value per row (every
// other holds one per element): what a checkpoint's reader needs to cut it.
inline constexpr char kRowSumSqState[] = "row_sum_sq";
inline bool IsPerRowState(const std::string& name) { return name == kRowSumSqState; }

struct TableShape {
  int64_t num_rows;  // the rows with state: 0 for a table no update reaches
  int32_t dim;
};

// SGD when config has no kind set. Allocates state for every table up front.
template <typename T>
std::unique_ptr<SparseOptimizer<T>> MakeSparseOptimizer(const config::SparseOptimizerConfig& config,
                                                        const std::vector<TableShape>& tables);

}  // namespace dlrm

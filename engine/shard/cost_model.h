// What one shard of an embedding table costs the server that owns it: memory, and load
// (estimated seconds per training step). Only config numbers go in: nothing is allocated,
// so a model of trillions of parameters costs as little to price as a small one.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/config/dlrm.pb.h"

namespace dlrm::shard {

// One table as the cost model sees it.
struct TableProfile {
  std::string name;
  int32_t index = 0;  // into model.tables
  int64_t num_rows = 0;
  int32_t dim = 0;
  config::TableConfig::Precision precision = config::TableConfig::FP32;  // FP32, BF16 or FP16
  // Mean ids per bag of each feature that reads the table (features may share a table).
  std::vector<double> pooling_factors;
};

// Per model.tables entry, in table order.
std::vector<TableProfile> ProfileTables(const config::ModelConfig& model);

class CostModel {
 public:
  // Reads config.sharding (batch, bandwidths, lookup cost) and config.sparse_optimizer.
  explicit CostModel(const config::DlrmConfig& config);

  // Sparse optimizer state per row of a shard `cols` wide: none for SGD, cols x 4 for
  // Adagrad, 4 for row-wise Adagrad (its own accumulator per row, also in a column
  // block), 2 x cols x 4 for Adam.
  int64_t StateBytesPerRow(int32_t cols) const;

  // Weights (4 or 2 bytes a value: the table's precision) + optimizer state of a rows x
  // cols shard of `table`.
  int64_t MemoryBytes(const TableProfile& table, int64_t rows, int32_t cols) const;

  // Seconds per step for the server owning `rows` rows (any contiguous range: ids are
  // assumed uniform over rows) x `cols` columns of `table`. Per feature of pooling P, with
  // batch B and row fraction f = rows / num_rows:
  //   lookups = B P f                  ids that land in the shard
  //   bags    = B min(1, P f)          bags with at least one such id (exact for P = 1)
  //   memory bytes  = 2 lookups cols 4   rows read forward, gradients the same again
  //   network bytes = 2 bags cols 4      pooled vectors out, their gradients back in
  //   load = memory bytes / memory_bandwidth + network bytes / network_bandwidth
  //          + lookups lookup_seconds
  double Load(const TableProfile& table, int64_t rows, int32_t cols) const;

  // A DATA_PARALLEL table costs each trainer the all-reduce of its dense gradient: a ring
  // all-reduce sends about twice the table's weight bytes over the network.
  double DataParallelLoad(const TableProfile& table) const;

  int64_t batch_size() const { return batch_size_; }

 private:
  int64_t batch_size_;
  double memory_bandwidth_;
  double network_bandwidth_;
  double lookup_seconds_;
  config::SparseOptimizerConfig sparse_optimizer_;
};

}  // namespace dlrm::shard

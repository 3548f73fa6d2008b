#include "engine/shard/cost_model.h"

#include <algorithm>
#include <unordered_map>

#include "engine/config/config.h"
#include "engine/core/status.h"

namespace dlrm::shard {

std::vector<TableProfile> ProfileTables(const config::ModelConfig& model) {
  std::vector<TableProfile> tables(model.tables_size());
  std::unordered_map<std::string, int> by_name;
  for (int t = 0; t < model.tables_size(); ++t) {
    const config::TableConfig& table = model.tables(t);
    tables[t].name = table.name();
    tables[t].index = t;
    tables[t].num_rows = table.num_rows();
    tables[t].dim = table.dim();
    tables[t].precision = table.precision();
    by_name.emplace(table.name(), t);
  }
  for (const config::SparseFeatureConfig& feature : model.sparse_features()) {
    const auto it = by_name.find(feature.table());
    DLRM_INTERNAL_CHECK(it != by_name.end());  // ValidateConfig checked the names
    tables[it->second].pooling_factors.push_back(feature.pooling_factor());
  }
  return tables;
}

CostModel::CostModel(const config::DlrmConfig& config)
    : batch_size_(config.sharding().batch_size()),
      memory_bandwidth_(config.sharding().memory_bandwidth()),
      network_bandwidth_(config.sharding().network_bandwidth()),
      lookup_seconds_(config.sharding().lookup_seconds()),
      sparse_optimizer_(config.sparse_optimizer()) {}

int64_t CostModel::StateBytesPerRow(int32_t cols) const {
  return SparseStateBytesPerRow(sparse_optimizer_, cols);
}

int64_t CostModel::MemoryBytes(const TableProfile& table, int64_t rows, int32_t cols) const {
  // ValidateConfig bounds num_rows * dim * 16, and weights + state are at most 12 bytes per
  // element, so this cannot overflow.
  return rows * RowBytes(sparse_optimizer_, table.precision, cols);
}

double CostModel::Load(const TableProfile& table, int64_t rows, int32_t cols) const {
  const double fraction = static_cast<double>(rows) / static_cast<double>(table.num_rows);
  const double batch = static_cast<double>(batch_size_);
  double lookups = 0, bags = 0;
  for (const double pooling : table.pooling_factors) {
    lookups += batch * pooling * fraction;
    bags += batch * std::min(1.0, pooling * fraction);
  }
  const double row_bytes = 4.0 * cols;
  return 2 * lookups * row_bytes / memory_bandwidth_ + 2 * bags * row_bytes / network_bandwidth_ +
         lookups * lookup_seconds_;
}

double CostModel::DataParallelLoad(const TableProfile& table) const {
  return 2.0 * static_cast<double>(table.num_rows) * table.dim * 4 / network_bandwidth_;
}

}  // namespace dlrm::shard

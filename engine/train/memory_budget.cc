#include "engine/train/memory_budget.h"

#include <algorithm>
#include <limits>

#include "engine/config/config.h"
#include "engine/core/status.h"
#include "engine/embedding/dynamic_rows.h"
#include "engine/embedding/quantized_row.h"
#include "engine/embedding/row_store.h"
#include "engine/model/dlrm_model.h"
#include "engine/optim/dense_optimizer.h"
#include "engine/shard/cost_model.h"

namespace dlrm::train {
namespace {

constexpr int64_t kUnlimited = std::numeric_limits<int64_t>::max();

int64_t SaturatingAdd(int64_t a, int64_t b) { return a > kUnlimited - b ? kUnlimited : a + b; }

// One table's bytes in memory: weights (or codes), optimizer state, a DYNAMIC table's id
// index, an SSD table's cache and row index.
int64_t TableBytes(const config::DlrmConfig& config, const shard::CostModel& cost,
                   const shard::TableProfile& profile, int t) {
  const auto& table = config.model().tables(t);
  const int64_t rows = ResidentRows(config, t);
  if (table.has_ssd())  // the cache with its index, and where the store has each row
    return SsdCacheBytes(config, t, rows) + RowStore::IndexBytes(table.num_rows());
  int64_t bytes = IsQuantized(table.precision())  // codes with their scale and bias, no state
                      ? rows * StoredRowBytes(table.precision(), table.dim())
                      : cost.MemoryBytes(profile, rows, table.dim());
  if (table.kind() == config::TableConfig::DYNAMIC)
    bytes = SaturatingAdd(bytes, static_cast<int64_t>(DynamicRows::MemoryBytesFor(
                                     DynamicRowsOptionsFor(table, config.seed(), t))));
  return bytes;
}

}  // namespace

int64_t DenseBytes(const config::DlrmConfig& config) {
  const auto probe = MakeDenseOptimizer<float>(config.dense_optimizer(), 1);
  int64_t copies = 2;  // the parameters and their gradient
  for (const auto& buffer : probe->StateBuffers()) copies += buffer.second->empty() ? 0 : 1;
  const auto params = static_cast<int64_t>(DenseParamCount(config));
  constexpr auto kFloat = static_cast<int64_t>(sizeof(float));
  return params > kUnlimited / (copies * kFloat) ? kUnlimited : params * copies * kFloat;
}

namespace {

// The tables' bytes (TableBytes), their sum, and the largest.
struct TablesBytes {
  int64_t total = 0, largest = -1;
  int largest_table = 0;
};
TablesBytes AllTablesBytes(const config::DlrmConfig& config) {
  const shard::CostModel cost(config);
  const std::vector<shard::TableProfile> profiles = shard::ProfileTables(config.model());
  TablesBytes b;
  for (int t = 0; t < config.model().tables_size(); ++t) {
    const int64_t bytes = TableBytes(config, cost, profiles[static_cast<size_t>(t)], t);
    b.total = SaturatingAdd(b.total, bytes);
    if (bytes > b.largest) b.largest = bytes, b.largest_table = t;
  }
  return b;
}

}  // namespace

int64_t ModelMemoryBytes(const config::DlrmConfig& config) {
  return SaturatingAdd(AllTablesBytes(config).total, DenseBytes(config));
}

void CheckModelFitsMemory(const config::DlrmConfig& config) {
  const TablesBytes tables = AllTablesBytes(config);
  const int64_t dense = DenseBytes(config);
  CheckFitsMemory(
      config, "the model", SaturatingAdd(tables.total, dense),
      StrCat(": the embedding tables ", tables.total,
             " (weights, optimizer state, id indexes and SSD tables' caches; the largest, "
             "table \"",
             config.model().tables(tables.largest_table).name(), "\", ", tables.largest,
             " bytes) and the dense parameters ", dense,
             " (with their gradient and optimizer state)"));
}

void CheckTrainerFitsMemory(const config::DlrmConfig& config, const shard::ShardingPlan& plan,
                            int32_t rank, bool owns_shards) {
  const int64_t shards =
      owns_shards && rank < plan.servers_size() ? plan.servers(rank).memory_bytes() : 0;
  const int64_t dense = DenseBytes(config);
  CheckFitsMemory(
      config, StrCat("trainer ", rank),
      SaturatingAdd(SaturatingAdd(shards, plan.trainer_memory_bytes()), dense),
      StrCat(": its embedding shards ", shards, ", the tables every trainer holds (DATA_PARALLEL) ",
             plan.trainer_memory_bytes(), " and the dense parameters ", dense,
             " (with their gradient and optimizer state)"));
}

}  // namespace dlrm::train

#include "engine/train/memory_budget.h"

#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <limits>

#include "engine/config/config.h"
#include "engine/core/status.h"
#include "engine/embedding/dynamic_rows.h"
#include "engine/embedding/quantized_row.h"
#include "engine/embedding/row_store.h"
#include "engine/shard/cost_model.h"

namespace dlrm::train {
namespace {

constexpr int64_t kUnlimited = std::numeric_limits<int64_t>::max();

int64_t SaturatingAdd(int64_t a, int64_t b) { return a > kUnlimited - b ? kUnlimited : a + b; }

// cgroup v2's memory.max ("max" or bytes); kUnlimited when absent or unlimited.
int64_t CgroupLimit() {
  std::ifstream in("/sys/fs/cgroup/memory.max");
  std::string text;
  if (!(in >> text) || text == "max" || text.find_first_not_of("0123456789") != std::string::npos ||
      text.size() > 18)
    return kUnlimited;
  return std::stoll(text);
}

}  // namespace

int64_t MachineMemoryBytes(std::string* source) {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  int64_t physical = pages > 0 && page > 0 ? static_cast<int64_t>(pages) * page : 0;
  *source = "physical memory";
  const int64_t cgroup = CgroupLimit();
  if (cgroup < physical || physical == 0) {
    if (cgroup == kUnlimited) return 0;
    *source = "cgroup memory.max";
    physical = cgroup;
  }
  return physical;
}

void CheckModelFitsMemory(const config::DlrmConfig& config) {
  std::string source = "memory_limit_bytes";
  int64_t limit = config.memory_limit_bytes();
  if (limit == 0) limit = MachineMemoryBytes(&source);
  if (limit == 0) return;  // nothing known to hold it to
  const shard::CostModel cost(config);
  const std::vector<shard::TableProfile> profiles = shard::ProfileTables(config.model());
  int64_t total = 0, largest = -1;
  int largest_table = 0;
  for (int t = 0; t < config.model().tables_size(); ++t) {
    const auto& table = config.model().tables(t);
    const int64_t rows = ResidentRows(config, t);
    int64_t bytes = IsQuantized(table.precision())  // codes with their scale and bias
                        ? rows * (StoredRowBytes(table.precision(), table.dim()) +
                                  cost.StateBytesPerRow(table.dim()))
                        : cost.MemoryBytes(profiles[static_cast<size_t>(t)], rows, table.dim());
    if (table.kind() == config::TableConfig::DYNAMIC)
      bytes = SaturatingAdd(bytes, static_cast<int64_t>(DynamicRows::MemoryBytesFor(
                                       DynamicRowsOptionsFor(table, config.seed(), t))));
    if (table.has_ssd())  // the cache with its index, and where the store has each row
      bytes = SsdCacheBytes(config, t, rows) + RowStore::IndexBytes(table.num_rows());
    total = SaturatingAdd(total, bytes);
    if (bytes > largest) largest = bytes, largest_table = t;
  }
  if (total <= limit) return;
  Throw(
      StatusCode::kResourceExhausted, "the embedding tables need ", total,
      " bytes (weights, optimizer state, id indexes and SSD tables' caches; the largest, table \"",
      config.model().tables(largest_table).name(), "\", ", largest, " bytes) but ", source, " is ",
      limit, " bytes");
}

}  // namespace dlrm::train

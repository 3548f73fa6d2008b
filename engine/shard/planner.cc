#include "engine/shard/planner.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "engine/config/config.h"
#include "engine/core/status.h"
#include "engine/shard/cost_model.h"
#include "engine/shard/placement.h"

namespace dlrm::shard {
namespace {

using Type = config::ShardingConfig::Type;
using config::ShardingConfig;

constexpr uint32_t Bit(Type type) { return 1u << static_cast<int>(type); }
constexpr uint32_t kAllTypes = Bit(ShardingConfig::TABLE_WISE) | Bit(ShardingConfig::ROW_WISE) |
                               Bit(ShardingConfig::COLUMN_WISE) |
                               Bit(ShardingConfig::TABLE_ROW_WISE) |
                               Bit(ShardingConfig::DATA_PARALLEL);
// What trainers that own their shards can hold (shard/pooled_layout.h). Where a trainer's
// shards are on a device its row-wise pieces stay in host memory (train/owned_shards.h),
// so there they are planned only where sharding.tables allows a table ROW_WISE.
constexpr uint32_t kTrainerTypes =
    Bit(ShardingConfig::TABLE_WISE) | Bit(ShardingConfig::COLUMN_WISE) |
    Bit(ShardingConfig::ROW_WISE) | Bit(ShardingConfig::DATA_PARALLEL);

// Piece i of `count` things (rows or columns) cut into `parts` near-equal contiguous
// ranges, the first count % parts of them one longer: [begin, end).
std::pair<int64_t, int64_t> Range(int64_t count, int32_t parts, int32_t i) {
  const int64_t base = count / parts, rem = count % parts;
  const int64_t begin = i * base + std::min<int64_t>(i, rem);
  return {begin, begin + base + (i < rem ? 1 : 0)};
}

// How one served table is cut: `parts` row ranges (TW, RW, TWRW) or column blocks (CW).
struct Split {
  Type type = ShardingConfig::TABLE_WISE;
  int32_t parts = 1;
  double max_load = 0;  // of the largest piece
  int64_t max_memory = 0;
  // Over all pieces: cutting rows can add load, as a bag whose ids fall in several row
  // ranges is pooled and sent by each of them.
  double total_load = 0;
};

std::string TypeList(uint32_t allowed) {
  std::string list;
  for (int type = ShardingConfig::Type_MIN; type <= ShardingConfig::Type_MAX; ++type) {
    if (!ShardingConfig::Type_IsValid(type) || !(allowed & Bit(static_cast<Type>(type)))) continue;
    if (!list.empty()) list += ", ";
    list += ShardingConfig::Type_Name(static_cast<Type>(type));
  }
  return list;
}

// Chooses each served table's split against per-piece targets: split_fraction of the
// per-server mean load and memory. With pieces that small, largest-first placement lands
// within about 1 + split_fraction of the mean.
class SplitChooser {
 public:
  SplitChooser(const CostModel& cost, const ShardingConfig& options, int32_t num_servers,
               double mean_load, double mean_memory, double target_memory, bool memory_first)
      : cost_(cost),
        options_(options),
        num_servers_(num_servers),
        group_size_(std::min(options.servers_per_group(), num_servers)),
        mean_load_(mean_load),
        mean_memory_(mean_memory),
        target_load_(options.split_fraction() * mean_load),
        target_memory_(target_memory),
        memory_first_(memory_first),
        capacity_(options.server_memory_bytes() > 0 ? options.server_memory_bytes()
                                                    : std::numeric_limits<int64_t>::max()) {}

  int32_t group_size() const { return group_size_; }

  Split Evaluate(const TableProfile& table, Type type, int32_t parts) const {
    const bool by_rows = type != ShardingConfig::COLUMN_WISE;
    const int64_t count = by_rows ? table.num_rows : table.dim;
    auto load = [&](int64_t n) {
      return by_rows ? cost_.Load(table, n, table.dim)
                     : cost_.Load(table, table.num_rows, static_cast<int32_t>(n));
    };
    const int64_t small = count / parts, rem = count % parts, big = small + (rem > 0);
    Split split;
    split.type = type;
    split.parts = parts;
    split.max_load = load(big);
    split.max_memory = by_rows
                           ? cost_.MemoryBytes(table, big, table.dim)
                           : cost_.MemoryBytes(table, table.num_rows, static_cast<int32_t>(big));
    split.total_load = static_cast<double>(rem) * split.max_load +
                       (small > 0 ? static_cast<double>(parts - rem) * load(small) : 0.0);
    return split;
  }

  Split Choose(const TableProfile& table, uint32_t allowed) const {
    std::vector<Split> candidates;  // in order of preference on a tie
    if (allowed & Bit(ShardingConfig::TABLE_WISE))
      candidates.push_back(Evaluate(table, ShardingConfig::TABLE_WISE, 1));
    if (allowed & Bit(ShardingConfig::ROW_WISE))
      candidates.push_back(
          Fewest(table, ShardingConfig::ROW_WISE,
                 static_cast<int32_t>(std::min<int64_t>(num_servers_, table.num_rows))));
    if (allowed & Bit(ShardingConfig::TABLE_ROW_WISE))
      candidates.push_back(
          Evaluate(table, ShardingConfig::TABLE_ROW_WISE,
                   static_cast<int32_t>(std::min<int64_t>(group_size_, table.num_rows))));
    if (allowed & Bit(ShardingConfig::COLUMN_WISE)) {
      const int32_t blocks = std::max(1, table.dim / options_.min_column_block());
      candidates.push_back(
          Fewest(table, ShardingConfig::COLUMN_WISE, std::min(blocks, num_servers_)));
    }
    const Split* best = nullptr;
    for (const Split& c : candidates)
      if (Fits(c) && (best == nullptr || Better(c, *best))) best = &c;
    if (best == nullptr) {
      int64_t smallest = std::numeric_limits<int64_t>::max();
      for (const Split& c : candidates) smallest = std::min(smallest, c.max_memory);
      Throw(StatusCode::kResourceExhausted, "table \"", table.name, "\" (model.tables[",
            table.index,
            "]) does not fit on a server: its smallest piece under the allowed types (",
            TypeList(allowed), ") needs ", smallest,
            " bytes, more than sharding.server_memory_bytes = ", capacity_);
    }
    return *best;
  }

 private:
  bool Fits(const Split& s) const { return s.max_memory <= capacity_; }
  bool Meets(const Split& s) const {
    return Fits(s) && s.max_load <= target_load_ && s.max_memory <= target_memory_;
  }

  // The largest piece relative to the per-server means (memory alone once placement has
  // run out of memory).
  double Size(const Split& s) const {
    const double memory = mean_memory_ > 0 ? static_cast<double>(s.max_memory) / mean_memory_ : 0.0;
    if (memory_first_) return memory;
    return std::max(mean_load_ > 0 ? s.max_load / mean_load_ : 0.0, memory);
  }

  // Splits meeting the targets beat those that do not; among them the least total load
  // wins (within rounding, where the earlier candidate wins), otherwise the smallest piece.
  bool Better(const Split& a, const Split& b) const {
    if (Meets(a) != Meets(b)) return Meets(a);
    if (Meets(a)) return a.total_load < b.total_load * (1 - 1e-9);
    return Size(a) < Size(b) * (1 - 1e-9);
  }

  // The fewest parts in [1, max_parts] meeting the targets, or max_parts when none does.
  Split Fewest(const TableProfile& table, Type type, int32_t max_parts) const {
    int32_t lo = 1, hi = max_parts;  // pieces only shrink as parts grow: binary search
    while (lo < hi) {
      const int32_t mid = lo + (hi - lo) / 2;
      if (Meets(Evaluate(table, type, mid)))
        hi = mid;
      else
        lo = mid + 1;
    }
    return Evaluate(table, type, lo);
  }

  const CostModel& cost_;
  const ShardingConfig& options_;
  const int32_t num_servers_;
  const int32_t group_size_;
  const double mean_load_, mean_memory_;
  const double target_load_, target_memory_;
  const bool memory_first_;
  const int64_t capacity_;
};

// One piece of a served table before placement.
struct Piece {
  int64_t row_begin, row_end;
  int32_t col_begin, col_end;
};

// The served tables cut into pieces: one placement unit per table.
struct Served {
  std::vector<PlacementUnit> units;
  std::vector<std::vector<Piece>> pieces;  // per unit, in row / column order
  std::vector<Type> types;                 // per unit
  std::vector<int> tables;                 // per unit: index into model.tables
};

Served SplitTables(const std::vector<TableProfile>& tables, const std::vector<bool>& replicated,
                   const std::vector<uint32_t>& allowed, const SplitChooser& chooser,
                   const CostModel& cost) {
  Served served;
  for (size_t t = 0; t < tables.size(); ++t) {
    if (replicated[t]) continue;
    const TableProfile& table = tables[t];
    const Split split = chooser.Choose(table, allowed[t]);
    PlacementUnit unit;
    unit.kind = split.type == ShardingConfig::TABLE_ROW_WISE ? PlacementUnit::Kind::kGroup
                : split.parts > 1                            ? PlacementUnit::Kind::kSpread
                                                             : PlacementUnit::Kind::kSingle;
    std::vector<Piece> pieces;
    for (int32_t i = 0; i < split.parts; ++i) {
      Piece piece{0, table.num_rows, 0, table.dim};
      if (split.type == ShardingConfig::COLUMN_WISE) {
        const auto [begin, end] = Range(table.dim, split.parts, i);
        piece.col_begin = static_cast<int32_t>(begin);
        piece.col_end = static_cast<int32_t>(end);
      } else {
        std::tie(piece.row_begin, piece.row_end) = Range(table.num_rows, split.parts, i);
      }
      const int64_t rows = piece.row_end - piece.row_begin;
      const int32_t cols = piece.col_end - piece.col_begin;
      unit.shards.push_back({cost.Load(table, rows, cols), cost.MemoryBytes(table, rows, cols)});
      pieces.push_back(piece);
    }
    served.units.push_back(std::move(unit));
    served.pieces.push_back(std::move(pieces));
    served.types.push_back(split.type);
    served.tables.push_back(static_cast<int>(t));
  }
  return served;
}

double Imbalance(double max, double total, int32_t n) {
  return total > 0 ? max / (total / n) : 1.0;
}

// Per table: the sharding types sharding.tables allows (where it says nothing, all but a
// device trainer's row-wise pieces) that the owners can hold and the sparse optimizer can
// update (row-wise Adagrad keeps one statistic per whole row: no column blocks).
std::vector<uint32_t> AllowedTypes(const config::DlrmConfig& config, ShardOwners owners) {
  const config::ModelConfig& model = config.model();
  uint32_t holdable = owners == ShardOwners::kServers ? kAllTypes : kTrainerTypes;
  if (config.sparse_optimizer().has_rowwise_adagrad())
    holdable &= ~Bit(ShardingConfig::COLUMN_WISE);
  // A device trainer's pieces would be looked up and updated by its host, not its device.
  uint32_t by_default = holdable;
  if (owners == ShardOwners::kTrainers && config.device().kind() != config::DeviceConfig::CPU)
    by_default &= ~Bit(ShardingConfig::ROW_WISE);
  std::vector<uint32_t> allowed(static_cast<size_t>(model.tables_size()), by_default);
  for (const ShardingConfig::TableOptions& entry : config.sharding().tables()) {
    uint32_t mask = 0;
    for (const int type : entry.allowed_types()) mask |= Bit(static_cast<Type>(type));
    if (mask == 0) continue;
    if ((mask & holdable) == 0)
      ThrowInvalid(
          "sharding.tables for \"", entry.table(), "\" allows only ", TypeList(mask), ", which ",
          owners == ShardOwners::kTrainers ? "trainers that own their shards" : "embedding servers",
          " cannot hold with this sparse optimizer (holdable: ", TypeList(holdable), ")");
    allowed[FindTable(model, entry.table())] = mask & holdable;
  }
  return allowed;
}

// Step 1: which tables every trainer replicates (DATA_PARALLEL), and what the rest weigh.
struct Replication {
  std::vector<bool> replicated;
  std::vector<int64_t> table_memory;
  double served_load = 0, served_memory = 0, replicated_memory = 0;
};

Replication Replicate(const std::vector<TableProfile>& tables, const std::vector<uint32_t>& allowed,
                      const CostModel& cost, const ShardingConfig& options) {
  Replication r;
  for (size_t t = 0; t < tables.size(); ++t) {
    const TableProfile& table = tables[t];
    const int64_t memory = cost.MemoryBytes(table, table.num_rows, table.dim);
    const uint32_t dp = Bit(ShardingConfig::DATA_PARALLEL);
    const bool replicated =
        (allowed[t] & dp) && (allowed[t] == dp || memory <= options.data_parallel_max_bytes());
    r.replicated.push_back(replicated);
    r.table_memory.push_back(memory);
    if (replicated) {
      r.replicated_memory += static_cast<double>(memory);
    } else {
      r.served_load += cost.Load(table, table.num_rows, table.dim);
      r.served_memory += static_cast<double>(memory);
    }
  }
  // Per-server and per-trainer byte counts are int64.
  if (std::max(r.served_memory, r.replicated_memory) >= 0x1p63)
    ThrowInvalid("model.tables need ", std::max(r.served_memory, r.replicated_memory),
                 " bytes in total, more than 2^63");
  return r;
}

// kResourceExhausted, naming the largest served table, when the served tables exceed what
// the servers hold.
void CheckServersHoldTables(const std::vector<TableProfile>& tables, const Replication& r,
                            int64_t capacity, int32_t num_servers) {
  if (capacity <= 0 || r.served_memory <= static_cast<double>(capacity) * num_servers) return;
  int largest = -1;
  for (int t = 0; t < static_cast<int>(tables.size()); ++t)
    if (!r.replicated[t] && (largest < 0 || r.table_memory[t] > r.table_memory[largest]))
      largest = t;
  Throw(StatusCode::kResourceExhausted, "the served tables need ",
        static_cast<int64_t>(r.served_memory), " bytes, more than ", num_servers,
        " servers of sharding.server_memory_bytes = ", capacity, " hold (the largest is table \"",
        tables[largest].name, "\", model.tables[", largest, "], of ", r.table_memory[largest],
        " bytes)");
}

// Step 2: the served tables split into pieces and placed on servers.
struct Layout {
  Served served;
  Placement placement;
  int32_t group_size = 1;
};

// Greedy placement stays within about one piece of the mean, so under a tight
// server_memory_bytes pieces are kept below the headroom over the mean, and cut finer
// still when placement runs out of room; kResourceExhausted naming the table that found
// no room after the last attempt.
Layout SplitAndPlace(const std::vector<TableProfile>& tables, const std::vector<uint32_t>& allowed,
                     const Replication& r, const CostModel& cost, const ShardingConfig& options,
                     int32_t num_servers, ShardOwners owners) {
  const int64_t capacity = options.server_memory_bytes();
  const double mean_load = r.served_load / num_servers;
  const double mean_memory = r.served_memory / num_servers;
  double target_memory = options.split_fraction() * mean_memory;
  if (capacity > 0) target_memory = std::min(target_memory, std::max(1.0, capacity - mean_memory));
  constexpr int kAttempts = 4;
  Layout layout;
  for (int attempt = 0; attempt < kAttempts; ++attempt, target_memory /= 4) {
    const SplitChooser chooser(cost, options, num_servers, mean_load, mean_memory, target_memory,
                               /*memory_first=*/attempt > 0);
    layout.served = SplitTables(tables, r.replicated, allowed, chooser, cost);
    PlacementOptions placement_options;
    placement_options.num_servers = num_servers;
    placement_options.server_memory_bytes = capacity;
    placement_options.group_size = layout.group_size = chooser.group_size();
    placement_options.strict_spread = owners == ShardOwners::kTrainers;
    layout.placement = PlaceUnits(layout.served.units, placement_options);
    if (layout.placement.failed_unit < 0) return layout;
  }
  const int u = layout.placement.failed_unit;
  const TableProfile& table = tables[layout.served.tables[u]];
  const bool trainers = owners == ShardOwners::kTrainers;
  const char* owner = trainers ? "trainer" : "server";
  Throw(StatusCode::kResourceExhausted, "table \"", table.name, "\" (model.tables[", table.index,
        "]) cannot be placed: no ", owner, " has room left for its ",
        ShardingTypeShortName(layout.served.types[u]), " shard of ",
        layout.served.units[u].shards.front().memory_bytes,
        " bytes under sharding.server_memory_bytes = ", capacity, " (", num_servers, " ", owner,
        "s; the served tables need ", static_cast<int64_t>(r.served_memory), " bytes",
        trainers ? "; a trainer holds at most one piece of a table)" : ")");
}

// A shard of `table` covering rows [row_begin, row_end) x columns [col_begin, col_end).
TableShard* AddShard(ShardingPlan* plan, const TableProfile& table, Type type, const Piece& piece) {
  TableShard* shard = plan->add_shards();
  shard->set_table(table.name);
  shard->set_table_index(table.index);
  shard->set_type(type);
  shard->set_row_begin(piece.row_begin);
  shard->set_row_end(piece.row_end);
  shard->set_col_begin(piece.col_begin);
  shard->set_col_end(piece.col_end);
  return shard;
}

// Step 3: the shards, in table order (a replicated table's one DATA_PARALLEL shard, a
// served table's pieces on their servers), and the trainers' totals.
void AddShards(const std::vector<TableProfile>& tables, const Replication& r, const Layout& layout,
               const CostModel& cost, ShardingPlan* plan) {
  int64_t trainer_memory = 0;
  double trainer_load = 0;
  size_t next_unit = 0;
  for (size_t t = 0; t < tables.size(); ++t) {
    const TableProfile& table = tables[t];
    if (r.replicated[t]) {
      TableShard* shard =
          AddShard(plan, table, ShardingConfig::DATA_PARALLEL, {0, table.num_rows, 0, table.dim});
      shard->set_memory_bytes(cost.MemoryBytes(table, table.num_rows, table.dim));
      shard->set_load(cost.DataParallelLoad(table));
      trainer_memory += shard->memory_bytes();
      trainer_load += shard->load();
      continue;
    }
    const size_t u = next_unit++;
    const Type type = layout.served.types[u];
    for (size_t i = 0; i < layout.served.pieces[u].size(); ++i) {
      const int32_t server = layout.placement.servers[u][i];
      TableShard* shard = AddShard(plan, table, type, layout.served.pieces[u][i]);
      shard->set_server(server);
      shard->set_memory_bytes(layout.served.units[u].shards[i].memory_bytes);
      shard->set_load(layout.served.units[u].shards[i].load);
      if (type == ShardingConfig::TABLE_ROW_WISE) shard->set_group(server / layout.group_size);
    }
  }
  plan->set_trainer_memory_bytes(trainer_memory);
  plan->set_trainer_load(trainer_load);
}

// Each server's totals over the plan's served shards, and the imbalances.
void AddServerTotals(int32_t num_servers, ShardingPlan* plan) {
  std::vector<double> load(num_servers, 0.0);
  std::vector<int64_t> memory(num_servers, 0);
  std::vector<int32_t> shards(num_servers, 0);
  for (const TableShard& shard : plan->shards()) {
    if (shard.type() == ShardingConfig::DATA_PARALLEL) continue;
    load[shard.server()] += shard.load();
    memory[shard.server()] += shard.memory_bytes();
    ++shards[shard.server()];
  }
  double total_load = 0, total_memory = 0, max_load = 0;
  int64_t max_memory = 0;
  for (int32_t s = 0; s < num_servers; ++s) {
    ServerTotals* totals = plan->add_servers();
    totals->set_server(s);
    totals->set_num_shards(shards[s]);
    totals->set_memory_bytes(memory[s]);
    totals->set_load(load[s]);
    total_load += load[s];
    total_memory += static_cast<double>(memory[s]);
    max_load = std::max(max_load, load[s]);
    max_memory = std::max(max_memory, memory[s]);
  }
  plan->set_load_imbalance(Imbalance(max_load, total_load, num_servers));
  plan->set_memory_imbalance(Imbalance(static_cast<double>(max_memory), total_memory, num_servers));
}

}  // namespace

void CheckShardColumns(const config::SparseOptimizerConfig& optimizer,
                       const config::TableConfig& table, int32_t col_begin, int32_t col_end) {
  if (optimizer.has_rowwise_adagrad() && (col_begin != 0 || col_end != table.dim()))
    ThrowInvalid("table '", table.name(),
                 "': row-wise Adagrad keeps one statistic per whole row, so it cannot run on a "
                 "COLUMN_WISE shard (columns [",
                 col_begin, ", ", col_end, ")); use another sharding type or optimizer");
}

const char* ShardingTypeShortName(config::ShardingConfig::Type type) {
  switch (type) {
    case ShardingConfig::TABLE_WISE: return "TW";
    case ShardingConfig::ROW_WISE: return "RW";
    case ShardingConfig::COLUMN_WISE: return "CW";
    case ShardingConfig::TABLE_ROW_WISE: return "TWRW";
    case ShardingConfig::DATA_PARALLEL: return "DP";
  }
  return "?";
}

namespace {

// PlanSharding's steps for the types `allowed` per table.
ShardingPlan PlanWith(const config::DlrmConfig& config, int32_t num_servers,
                      const std::vector<uint32_t>& allowed, ShardOwners owners) {
  const ShardingConfig& options = config.sharding();
  const CostModel cost(config);
  const std::vector<TableProfile> tables = ProfileTables(config.model());
  // 1. Replicate what is small enough; the rest is served.
  const Replication replication = Replicate(tables, allowed, cost, options);
  CheckServersHoldTables(tables, replication, options.server_memory_bytes(), num_servers);
  // 2. Split the served tables and place the pieces.
  const Layout layout =
      SplitAndPlace(tables, allowed, replication, cost, options, num_servers, owners);
  // 3. The plan, in table order.
  ShardingPlan plan;
  plan.set_num_servers(num_servers);
  plan.set_batch_size(cost.batch_size());
  AddShards(tables, replication, layout, cost, &plan);
  AddServerTotals(num_servers, &plan);
  return plan;
}

// For trainers that own their shards: the plan without row-wise pieces where it balances
// within 1 + 2 x split_fraction, else none (a table allowed only pieces, or too large).
// Trainers pool whole-row shards themselves but fetch the rows of pieces for every bag
// (shard/pooled_layout.h): more bytes and work, worth it only for balance or memory.
std::optional<ShardingPlan> WholeRowPlan(const config::DlrmConfig& config, int32_t num_servers,
                                         std::vector<uint32_t> allowed) {
  for (uint32_t& types : allowed) {
    types &= ~Bit(ShardingConfig::ROW_WISE);
    if (types == 0) return std::nullopt;
  }
  try {
    ShardingPlan plan = PlanWith(config, num_servers, allowed, ShardOwners::kTrainers);
    const double bound = 1 + 2 * config.sharding().split_fraction();
    if (plan.load_imbalance() <= bound && plan.memory_imbalance() <= bound) return plan;
  } catch (const Error&) {  // the plan with pieces says what cannot be done, if anything
  }
  return std::nullopt;
}

}  // namespace

ShardingPlan PlanSharding(const config::DlrmConfig& config, int32_t num_servers,
                          ShardOwners owners) {
  ValidateConfig(config);
  RequireTrainableRows(config.model(), "the sharding planner");
  if (num_servers < 1 || num_servers > kMaxServers)
    ThrowInvalid("num_servers must be in [1, ", kMaxServers, "], got ", num_servers);
  const std::vector<uint32_t> allowed = AllowedTypes(config, owners);
  if (owners == ShardOwners::kTrainers)
    if (std::optional<ShardingPlan> plan = WholeRowPlan(config, num_servers, allowed))
      return *std::move(plan);
  return PlanWith(config, num_servers, allowed, owners);
}

}  // namespace dlrm::shard

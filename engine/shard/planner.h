// The sharding planner: decides how each embedding table of a config is split and on
// which embedding server each piece lives, from config numbers only. Nothing is
// allocated, so a model of trillions of parameters is planned as fast as a small one.
//
// Per table, from model.tables, the pooling factors of the features that read it, the
// sparse optimizer and config.sharding:
//   1. DATA_PARALLEL when allowed and its weights + optimizer state are at most
//      sharding.data_parallel_max_bytes (or it is the only allowed type).
//   2. Otherwise the table is served. A table is split when one piece would exceed
//      sharding.split_fraction of the per-server mean load or memory (or the server
//      memory): into the fewest ROW_WISE row ranges or COLUMN_WISE column blocks that meet
//      that bound (at most one per server), preferring the split that adds the least load;
//      TABLE_WISE when no split is needed; TABLE_ROW_WISE (one row range per server of a
//      group) only when allowed and row-wise is not.
//   3. Placement (placement.h): largest first onto the least loaded server, then a
//      refinement pass. When sharding.server_memory_bytes is tight, pieces are kept below
//      the headroom over the mean memory and, if placement still runs out of room, cut
//      finer (up to a few times) before giving up with an error naming the table.
#pragma once

#include <cstdint>

#include "engine/config/dlrm.pb.h"
#include "engine/shard/plan.pb.h"

namespace dlrm::shard {

// The most servers a plan may have.
inline constexpr int32_t kMaxServers = 1 << 20;

// Who holds the served pieces. kServers: embedding servers (every type). kTrainers: the
// trainers themselves, "server" r being trainer r (train/model_parallel_trainer.h):
// TABLE_WISE, COLUMN_WISE and DATA_PARALLEL shards, and ROW_WISE pieces (which every rank
// fetches rows of) only where a plan of whole rows would not balance load and memory
// within 1 + 2 x sharding.split_fraction, and on trainers whose device is not the CPU
// (whose pieces stay in host memory) only for tables sharding.tables allows ROW_WISE.
enum class ShardOwners { kServers, kTrainers };

// Throws kInvalidArgument naming the field for an invalid config (ValidateConfig),
// num_servers outside [1, kMaxServers], or (kTrainers) a table allowed only types the
// trainers cannot hold; kResourceExhausted naming the table when
// sharding.server_memory_bytes cannot hold it. Deterministic: the same input gives the
// same plan, bit for bit.
ShardingPlan PlanSharding(const config::DlrmConfig& config, int32_t num_servers,
                          ShardOwners owners = ShardOwners::kServers);

// kInvalidArgument naming the table when `optimizer` keeps one statistic per whole row
// (row-wise Adagrad) and the shard holds only columns [col_begin, col_end) of it.
void CheckShardColumns(const config::SparseOptimizerConfig& optimizer,
                       const config::TableConfig& table, int32_t col_begin, int32_t col_end);

// "TW", "RW", "CW", "TWRW", "DP".
const char* ShardingTypeShortName(config::ShardingConfig::Type type);

}  // namespace dlrm::shard

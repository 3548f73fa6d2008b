// Balanced greedy placement of table shards on embedding servers.
//
// Shards are placed largest first onto the server that ends up least loaded (LPT), where
// "loaded" weighs both dimensions, each relative to its per-server mean: a server's score
// is max(load / mean load, memory / mean memory), so load-heavy shards of small tables and
// memory-heavy shards of big tables are mixed on every server. The shards of one split
// table go to distinct servers. A refinement pass then moves or swaps shards off the most
// loaded server while that lowers the maximum load without raising peak memory.
// Servers are 0..num_servers-1; group g is servers [g * group_size, (g + 1) * group_size).
#pragma once

#include <cstdint>
#include <vector>

namespace dlrm::shard {

struct ShardCost {
  double load = 0;  // seconds per step
  int64_t memory_bytes = 0;
};

// The shards of one table, placed together.
struct PlacementUnit {
  enum class Kind {
    kSingle,  // one shard, anywhere
    kSpread,  // shards on distinct servers (row-wise, column-wise)
    kGroup,   // shards on distinct servers of one group (table-row-wise); never moved after
  };
  Kind kind = Kind::kSingle;
  std::vector<ShardCost> shards;
};

struct PlacementOptions {
  int32_t num_servers = 1;
  int64_t server_memory_bytes = 0;  // 0 = unlimited
  int32_t group_size = 1;           // in [1, num_servers]
  bool refine = true;
  // A spread unit's shards never share a server: the unit fails instead (trainers that own
  // shards hold one piece of a table each: shard/pooled_layout.h). Otherwise, where too
  // few servers have room, the rest share servers rather than fail.
  bool strict_spread = false;
};

struct Placement {
  // servers[u][i]: the server of shard i of unit u.
  std::vector<std::vector<int32_t>> servers;
  // The first unit that found no server with room for a shard, or -1. When set, the
  // placement is incomplete.
  int32_t failed_unit = -1;
};

// Deterministic: the same units and options give the same placement.
Placement PlaceUnits(const std::vector<PlacementUnit>& units, const PlacementOptions& options);

}  // namespace dlrm::shard

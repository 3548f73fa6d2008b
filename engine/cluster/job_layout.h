// Who is who in a multi-process job, from the roster: servers and trainers are numbered
// among their own role by ascending rank (server 0 is the server with the lowest rank),
// and the sharding plan is computed from the config and the number of shard owners, so
// every process derives the same plan without exchanging it. The owners are the embedding
// servers; a job without servers has its trainers own the shards (the Neo layout,
// train/model_parallel_trainer.h): "server" r of its plan is trainer r.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/cluster/cluster.pb.h"
#include "engine/config/dlrm.pb.h"
#include "engine/shard/plan.pb.h"

namespace dlrm::cluster {

struct JobLayout {
  std::vector<std::string> server_addresses;   // by server index
  std::vector<std::string> trainer_addresses;  // by trainer index
  std::vector<std::string> trainer_links;      // by trainer index (PeerInfo.link)
  int32_t index = -1;                          // this process's number among its role
  shard::ShardingPlan plan;

  int32_t num_servers() const { return static_cast<int32_t>(server_addresses.size()); }
  int32_t num_trainers() const { return static_cast<int32_t>(trainer_addresses.size()); }
  bool trainers_own_shards() const { return server_addresses.empty(); }
  // Who holds the plan's shards: the servers, or the trainers.
  int32_t num_owners() const { return trainers_own_shards() ? num_trainers() : num_servers(); }
};

// kInvalidArgument when the roster has no trainer, or rank is not in it.
JobLayout LayoutFromRoster(const Roster& roster, int32_t rank, const config::DlrmConfig& config);

}  // namespace dlrm::cluster

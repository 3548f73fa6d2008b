#include "engine/cluster/job_layout.h"

#include "engine/config/config.h"
#include "engine/core/status.h"
#include "engine/shard/planner.h"

namespace dlrm::cluster {

JobLayout LayoutFromRoster(const Roster& roster, int32_t rank, const config::DlrmConfig& config) {
  JobLayout layout;
  if (rank < 0 || rank >= roster.peers_size())
    ThrowInvalid("rank ", rank, " is not in the roster of ", roster.peers_size(), " peers");
  for (const PeerInfo& peer : roster.peers()) {
    std::vector<std::string>& list =
        peer.role() == ROLE_SERVER ? layout.server_addresses : layout.trainer_addresses;
    if (peer.rank() == rank) layout.index = static_cast<int32_t>(list.size());
    list.push_back(peer.address());
    if (peer.role() == ROLE_TRAINER) layout.trainer_links.push_back(peer.link());
  }
  if (layout.trainer_addresses.empty())
    ThrowInvalid("a training job needs at least one trainer; the roster has ", layout.num_servers(),
                 " servers and no trainer");
  layout.plan = shard::PlanSharding(
      config, layout.num_owners(),
      layout.trainers_own_shards() ? shard::ShardOwners::kTrainers : shard::ShardOwners::kServers);
  return layout;
}

}  // namespace dlrm::cluster

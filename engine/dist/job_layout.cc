#include "engine/dist/job_layout.h"

#include <google/protobuf/util/message_differencer.h>

#include "engine/config/config.h"
#include "engine/core/status.h"
#include "engine/dist/shard_checkpoint.h"
#include "engine/shard/planner.h"

namespace dlrm::dist {

JobLayout LayoutFromRoster(const net::Roster& roster, int32_t rank,
                           const config::DlrmConfig& config) {
  JobLayout layout;
  if (rank < 0 || rank >= roster.peers_size())
    ThrowInvalid("rank ", rank, " is not in the roster of ", roster.peers_size(), " peers");
  for (const net::PeerInfo& peer : roster.peers()) {
    std::vector<std::string>& list = peer.role() == net::ROLE_SERVER ? layout.server_addresses
                                                                     : layout.trainer_addresses;
    if (peer.rank() == rank) layout.index = static_cast<int32_t>(list.size());
    list.push_back(peer.address());
  }
  if (layout.server_addresses.empty() || layout.trainer_addresses.empty())
    ThrowInvalid("a training job needs at least one server and one trainer; the roster has ",
                 layout.num_servers(), " servers and ", layout.num_trainers(), " trainers");
  layout.plan = shard::PlanSharding(config, layout.num_servers());
  return layout;
}

CheckpointManifest ManifestForRestore(const std::string& dir, const config::DlrmConfig& config,
                                      const JobLayout& layout) {
  const CheckpointManifest manifest = ReadManifest(dir);
  const auto differ = [&](const std::string& what, const std::string& saved,
                          const std::string& now) {
    Throw(StatusCode::kFailedPrecondition, "checkpoint ", dir, " cannot be restored into this ",
          "job: its ", what, " (", saved, ") differs from this job's (", now, ")");
  };
  if (manifest.num_servers() != layout.num_servers())
    differ("number of servers", std::to_string(manifest.num_servers()),
           std::to_string(layout.num_servers()));
  if (manifest.num_trainers() != layout.num_trainers())
    differ("number of trainers", std::to_string(manifest.num_trainers()),
           std::to_string(layout.num_trainers()));
  config::DlrmConfig saved;
  try {
    saved = ParseConfigText(manifest.config());
  } catch (const Error& e) {
    Throw(StatusCode::kDataLoss, "checkpoint ", dir, ": the manifest's config: ", e.what());
  }
  std::string differences;
  google::protobuf::util::MessageDifferencer model_differ;
  model_differ.ReportDifferencesToString(&differences);
  if (!model_differ.Compare(saved.model(), config.model()))
    differ("model", "see: " + differences, "the config given");
  if (saved.dense_optimizer().kind_case() != config.dense_optimizer().kind_case() ||
      saved.sparse_optimizer().kind_case() != config.sparse_optimizer().kind_case())
    differ("optimizer kinds", "dense/sparse of the saved config", "the config given");
  if (!google::protobuf::util::MessageDifferencer::Equals(manifest.plan(), layout.plan))
    differ("sharding plan", "the saved plan", "the plan of this config and server count");
  return manifest;
}

}  // namespace dlrm::dist

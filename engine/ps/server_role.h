// The embedding-server role of a multi-process job (DLRM_ROLE=server): listen, rendezvous,
// build this server's shards of the plan (or restore them from a sharded checkpoint),
// serve the trainers until every one of them is done, leave.
#pragma once

#include <string>

#include "engine/config/dlrm.pb.h"
#include "engine/cluster/cluster_env.h"
#include "engine/net/context.h"

namespace dlrm::dist {

// config must pass ValidateConfig and be the trainers' config. restore_dir: a checkpoint
// directory to resume from, or empty. Throws what fails (rendezvous, restore, transport).
void RunEmbeddingServer(const net::Context& context, const ClusterEnv& env,
                        const config::DlrmConfig& config, const std::string& restore_dir);

}  // namespace dlrm::dist

#include "engine/ps/server_role.h"

#include <chrono>
#include <memory>

#include "engine/checkpoint/sharded_checkpoint.h"
#include "engine/cluster/coordinator.h"
#include "engine/cluster/job_config.h"
#include "engine/cluster/job_layout.h"
#include "engine/cluster/rendezvous.h"
#include "engine/config/config.h"
#include "engine/core/log.h"
#include "engine/core/status.h"
#include "engine/core/thread_pool.h"
#include "engine/net/endpoint.h"
#include "engine/ps/server.h"
#include "engine/ps/shard_owner.h"
#include "engine/ps/shard_store.h"
#include "engine/ps/shard_store_file.h"

namespace dlrm::ps {

void CheckServerFitsMemory(const config::DlrmConfig& config, const shard::ShardingPlan& plan,
                           int32_t server) {
  DLRM_INTERNAL_CHECK(server >= 0 && server < plan.servers_size());
  CheckFitsMemory(config, StrCat("server ", server), plan.servers(server).memory_bytes(),
                  " for its embedding shards (weights and sparse optimizer state, as the plan "
                  "prices them)",
                  0, ": run more servers or give each more memory");
}

namespace {

// Server layout.index's part of the job, from its memory check to the last trainer's
// departure: its shards built (or restored from restore_dir), then served on `listener`
// (made with `options`). Throws what fails; the caller tells the coordinator.
void ServeShards(const cluster::ClusterEnv& env, const config::DlrmConfig& config,
                 const cluster::JobLayout& layout, const std::string& restore_dir,
                 net::Endpoint* listener, const net::TransportOptions& options) {
  CheckServerFitsMemory(config, layout.plan, layout.index);
  ThreadPool pool(ResolveThreadCount(config.num_threads()));
  EmbeddingShardStore store(config, layout.plan, layout.index, &pool);
  int64_t applied = 0;
  if (!restore_dir.empty()) {
    const checkpoint::CheckpointManifest manifest =
        checkpoint::ManifestForRestore(restore_dir, config);
    const bool same =
        checkpoint::SameLayout(manifest, layout.num_servers(), layout.num_trainers(), layout.plan);
    applied = same ? LoadShardStore(&store, layout.index,
                                    restore_dir + "/" + checkpoint::ServerShardFile(layout.index))
                   : LoadReshardedStore(&store, restore_dir, manifest, config.model());
    DLRM_LOG(kInfo)
        << "server " << layout.index << ": restored step " << applied << " from " << restore_dir
        << (same ? "" : " (resharded from " + std::to_string(manifest.num_servers()) + " servers)");
  }
  ShardOwner owner(&store, layout.index, layout.num_trainers(),
                   StalenessBound(config.distributed()), applied);
  EmbeddingServer server(listener, &owner, layout.index, layout.trainer_links,
                         std::chrono::milliseconds(env.timeout_ms),
                         WireValuePrecision(config.distributed()), options.max_message_bytes);
  DLRM_LOG(kInfo) << "server " << layout.index << " (rank " << env.rank << ") serves "
                  << store.shards().size() << " shards at " << listener->address() << " for "
                  << layout.num_trainers() << " trainers, staleness " << owner.staleness();
  server.Serve();
  DLRM_LOG(kInfo) << "server " << layout.index << ": every trainer is done; "
                  << server.lookups_served() << " lookups served, " << server.messages_dropped()
                  << " bad or forged messages dropped";
}

}  // namespace

void RunEmbeddingServer(const net::Context& context, const cluster::ClusterEnv& env,
                        const config::DlrmConfig& config, const std::string& restore_dir) {
  if (env.role != cluster::ROLE_SERVER)
    ThrowInvalid("RunEmbeddingServer with DLRM_ROLE=", cluster::RoleName(env.role));
  const std::string name = "server rank " + std::to_string(env.rank);
  // Its abort signal is raised when the job cannot go on (a peer died): Serve's waits end.
  const cluster::MemberTransport member = cluster::MakeMemberTransport(env);
  net::Endpoint listener(context, net::Endpoint::kListen, env.PeerBindEndpoint(), member.options,
                         name);
  cluster::CoordinatorClient coordinator(context, env, member);
  const cluster::Roster roster =
      coordinator.Rendezvous(listener.address(), cluster::JobConfigOf(config));
  const cluster::JobLayout layout = cluster::LayoutFromRoster(roster, env.rank, config);

  try {
    ServeShards(env, config, layout, restore_dir, &listener, member.options);
  } catch (const Error& e) {
    coordinator.LeaveFailed(e.what());  // every other peer learns why at once
    throw;
  }
  coordinator.Leave();
}

void RunServingRole(const cluster::ClusterEnv& env,
                    const std::function<config::DlrmConfig()>& config,
                    const std::string& restore_dir) {
  if (env.role == cluster::ROLE_COORDINATOR) {
    net::Context context;
    cluster::RunCoordinator(context, env);
  } else if (env.role == cluster::ROLE_SERVER) {
    const config::DlrmConfig server_config = config();
    net::Context context;
    RunEmbeddingServer(context, env, server_config, restore_dir);
  } else {
    ThrowInvalid("the serving roles are the coordinator and the servers; DLRM_ROLE is ",
                 cluster::RoleName(env.role), " (a trainer is a TrainerRole: dlrm_trainer_create)");
  }
}

}  // namespace dlrm::ps

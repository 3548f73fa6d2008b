// The roles of a multi-process job that serve until the job ends: the embedding server
// (DLRM_ROLE=server: listen, rendezvous, build this server's shards of the plan or restore
// them from a sharded checkpoint, serve the trainers until every one of them is done,
// leave) and, through RunServingRole, the coordinator. The trainer is train/trainer_role.h.
// Blocking calls; each role runs on the calling thread and owns its transport context.
#pragma once

#include <functional>
#include <string>

#include "engine/cluster/cluster_env.h"
#include "engine/config/dlrm.pb.h"
#include "engine/net/context.h"
#include "engine/shard/plan.pb.h"

namespace dlrm::ps {

// Refuses to build server `server`'s shards of `plan` when they need more than
// MemoryLimitBytes(config) (config.h): kResourceExhausted naming the bytes the plan prices
// them at (plan.servers(server).memory_bytes(): weights and sparse optimizer state) and
// the limit with its source. Called before anything is allocated; trainers check their
// own part (train/memory_budget.h).
void CheckServerFitsMemory(const config::DlrmConfig& config, const shard::ShardingPlan& plan,
                           int32_t server);

// config must pass ValidateConfig and be the trainers' config. restore_dir: a checkpoint
// directory to resume from, or empty. Throws what fails (rendezvous, restore, transport).
void RunEmbeddingServer(const net::Context& context, const cluster::ClusterEnv& env,
                        const config::DlrmConfig& config, const std::string& restore_dir);

// The coordinator (RunCoordinator) or an embedding server, as env.role says, with a
// transport context of its own; kInvalidArgument for a trainer. config is called only for
// a server (the coordinator needs none), and must return a validated config.
void RunServingRole(const cluster::ClusterEnv& env,
                    const std::function<config::DlrmConfig()>& config,
                    const std::string& restore_dir);

}  // namespace dlrm::ps

#include "engine/train/trainer_role.h"

#include <system_error>

#include "engine/checkpoint/sharded_checkpoint.h"
#include "engine/cluster/job_config.h"
#include "engine/cluster/roster.h"
#include "engine/collective/gloo_communicator.h"
#include "engine/collective/net_communicator.h"
#include "engine/config/config.h"
#include "engine/core/byte_codec.h"
#include "engine/core/crc32c.h"
#include "engine/core/log.h"
#include "engine/core/status.h"
#include "engine/ps/shard_store_file.h"
#include "engine/train/memory_budget.h"

namespace dlrm::train {
namespace {

std::chrono::milliseconds Timeout(const cluster::ClusterEnv& env) {
  return std::chrono::milliseconds(env.timeout_ms);
}

std::chrono::milliseconds AllGatherTimeout(const cluster::ClusterEnv& env) {
  return cluster::kAllGatherTimeouts * Timeout(env);
}

// "" when every trainer's `errors` entry is, else the first as "trainer r: ...".
std::string FirstError(const std::vector<std::string>& errors) {
  for (size_t r = 0; r < errors.size(); ++r)
    if (!errors[r].empty()) return "trainer " + std::to_string(r) + ": " + errors[r];
  return "";
}

}  // namespace

TrainerRole::TrainerRole(const cluster::ClusterEnv& env, const config::DlrmConfig& config,
                         const std::string& restore_dir,
                         const CommunicatorFactory& make_communicator,
                         const TrainerDevices& devices)
    : config_(Validated(env, config)),
      env_(env),
      pool_(ResolveThreadCount(config_.num_threads())),
      member_(cluster::MakeMemberTransport(env)),
      listener_(context_, net::Endpoint::kListen, env.PeerBindEndpoint(), member_.options,
                "trainer rank " + std::to_string(env.rank)),
      coordinator_(context_, env, member_) {
  if (env.role != cluster::ROLE_TRAINER)
    ThrowInvalid("TrainerRole with DLRM_ROLE=", cluster::RoleName(env.role));
  const cluster::Roster roster =
      coordinator_.Rendezvous(listener_.address(), cluster::JobConfigOf(config_));
  try {
    layout_ = cluster::LayoutFromRoster(roster, env.rank, config_);
    comm_ = MakeCommunicator(make_communicator, devices);
    if (layout_.trainers_own_shards()) RequireOnePlan();
    MakeTrainer(devices);
    if (!restore_dir.empty()) Restore(restore_dir);
  } catch (const std::exception& e) {
    // Joined: every other peer learns why at once (not "it ended without finishing").
    coordinator_.LeaveFailed(e.what());
    throw;
  }
}

void TrainerRole::RequireOnePlan() {
  const std::string plan = layout_.plan.SerializeAsString();
  const std::string mine = config::DeviceConfig::Kind_Name(config_.device().kind()) + " " +
                           std::to_string(Crc32c(0, plan.data(), plan.size()));
  const std::vector<std::string> all = comm_->AllGather(mine);
  for (size_t r = 1; r < all.size(); ++r)
    if (all[r] != all[0]) {
      const auto kind = [&](size_t t) { return all[t].substr(0, all[t].find(' ')); };
      ThrowInvalid("trainers 0 (device.kind ", kind(0), ") and ", r, " (device.kind ", kind(r),
                   ") planned different shards; a job whose trainers own the shards needs "
                   "one plan, and the planner keeps tables whole on GPU trainers: give every "
                   "trainer the same device kind (DLRM_DEVICE, --device)");
    }
}

void TrainerRole::MakeTrainer(const TrainerDevices& devices) {
  CheckTrainerFitsMemory(config_, layout_.plan, comm_->rank(), layout_.trainers_own_shards());
  if (layout_.trainers_own_shards()) {
    auto owner =
        std::make_unique<ModelParallelTrainer>(config_, layout_.plan, comm_.get(), &pool_, devices);
    owner_ = owner.get();
    trainer_ = std::move(owner);
    return;
  }
  service_ = std::make_unique<ps::RemoteEmbeddingService>(
      context_, layout_.server_addresses, layout_.index, member_.options, Timeout(env_),
      WireValuePrecision(config_.distributed()));
  trainer_ = std::make_unique<DataParallelTrainer>(config_, layout_.plan, comm_.get(),
                                                   service_.get(), &pool_, devices.backend);
}

config::DlrmConfig TrainerRole::Validated(const cluster::ClusterEnv& env,
                                          const config::DlrmConfig& given) {
  config::DlrmConfig config = cluster::WithTrainerDevice(env, given);
  ValidateConfig(config);
  if (env.collective == cluster::ClusterEnv::Collective::kNccl &&
      config.device().kind() != config::DeviceConfig::CUDA)
    ThrowInvalid(
        "DLRM_COLLECTIVE=nccl needs device.kind CUDA (NCCL exchanges a trainer's "
        "GPU memory), got device.kind ",
        config::DeviceConfig::Kind_Name(config.device().kind()));
  return config;
}

std::unique_ptr<collective::Communicator> TrainerRole::MakeCommunicator(
    const CommunicatorFactory& factory, const TrainerDevices& devices) {
  using Collective = cluster::ClusterEnv::Collective;
  if (factory && env_.collective != Collective::kBuiltin)
    ThrowInvalid("DLRM_COLLECTIVE=", env_.collective == Collective::kGloo ? "gloo" : "nccl",
                 " and a host all-gather were both given: choose one");
  std::unique_ptr<collective::Communicator> comm;
  if (factory) {
    comm = factory(layout_.index, layout_.num_trainers());
  } else if (env_.collective == Collective::kNccl) {
    if (!devices.communicator)
      Throw(StatusCode::kFailedPrecondition,
            "DLRM_COLLECTIVE=nccl but this trainer was made without device backends (a host "
            "of the train layer alone): give it engine/device_backends.h's");
    comm = devices.communicator(MakeHostCommunicator(), config_);
  } else {
    comm = MakeHostCommunicator();
  }
  if (!comm || comm->rank() != layout_.index || comm->world_size() != layout_.num_trainers())
    ThrowInvalid("the communicator is not rank ", layout_.index, " of ", layout_.num_trainers(),
                 " (this trainer's index and the trainer count)");
  return comm;
}

std::unique_ptr<collective::Communicator> TrainerRole::MakeHostCommunicator() {
  std::unique_ptr<collective::Communicator> comm = std::make_unique<collective::NetCommunicator>(
      context_, &listener_, layout_.trainer_addresses, layout_.trainer_links, layout_.index,
      member_.options, AllGatherTimeout(env_));
  if (env_.collective != cluster::ClusterEnv::Collective::kGloo) return comm;
  // Gloo listens on the address this trainer was reached at (the roster's, where a
  // wildcard bind was replaced by the address the coordinator saw).
  return collective::MakeGlooCommunicator(
      std::move(comm), cluster::EndpointHost(layout_.trainer_addresses[layout_.index]),
      AllGatherTimeout(env_));
}

void TrainerRole::Restore(const std::string& restore_dir) {
  const checkpoint::CheckpointManifest manifest =
      checkpoint::ManifestForRestore(restore_dir, config_);
  const int64_t step =
      checkpoint::LoadDenseState(&trainer_->mutable_model(), &trainer_->dense_optimizer(),
                                 restore_dir + "/" + checkpoint::kDenseStateFile);
  const bool same =
      checkpoint::SameLayout(manifest, layout_.num_owners(), layout_.num_trainers(), layout_.plan);
  if (!same)
    ps::LoadReshardedStore(&trainer_->mutable_replicas(), restore_dir, manifest, config_.model());
  else if (manifest.has_replicas())
    ps::LoadShardStore(&trainer_->mutable_replicas(), ps::kTrainerReplica,
                       restore_dir + "/" + checkpoint::kReplicaShardFile);
  if (owner_ != nullptr && !same)
    ps::LoadReshardedStore(&owner_->mutable_owned(), restore_dir, manifest, config_.model());
  else if (owner_ != nullptr)
    ps::LoadShardStore(&owner_->mutable_owned(), layout_.index,
                       restore_dir + "/" + checkpoint::ServerShardFile(layout_.index));
  if (step != manifest.step())
    Throw(StatusCode::kDataLoss, "checkpoint ", restore_dir, ": the dense state is of step ", step,
          ", the manifest says ", manifest.step());
  trainer_->set_step(step);
  DLRM_LOG(kInfo) << "trainer " << layout_.index << ": restored step " << step << " from "
                  << restore_dir;
}

TrainerRole::~TrainerRole() = default;

void TrainerRole::Checkpoint(const std::string& dir) {
  if (dir.empty()) ThrowInvalid("checkpoint directory is empty");
  const int64_t step = trainer_->step();
  // Every trainer stops sending updates here, so the servers save exactly `step`.
  trainer_->Flush();
  // Trainer 0 takes the directory's old manifest away before any of its files is replaced;
  // trainers that own shards then save them: the manifest follows every file.
  std::string error = layout_.index == 0 ? BeginCheckpoint(dir) : "";
  if (owner_ != nullptr) {
    error = FirstError(comm_->AllGather(error));
    if (error.empty()) error = FirstError(comm_->AllGather(SaveOwnedShards(dir, step)));
  }
  if (layout_.index == 0 && error.empty()) {
    try {
      WriteCheckpoint(dir, step);
    } catch (const Error& e) {
      error = e.what();
    }
  }
  // The barrier that holds the others' next updates back, and tells them the outcome.
  const std::vector<std::string> outcome = comm_->AllGather(error);
  if (!outcome[0].empty())
    Throw(StatusCode::kIo, "checkpoint of step ", step, " to ", dir, " failed: ", outcome[0]);
  DLRM_LOG(kInfo) << "trainer " << layout_.index << ": checkpoint of step " << step << " in "
                  << dir;
}

std::string TrainerRole::BeginCheckpoint(const std::string& dir) {
  try {
    checkpoint::BeginCheckpointDir(dir);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

std::string TrainerRole::SaveOwnedShards(const std::string& dir, int64_t step) {
  if (owner_ == nullptr) return "";
  try {
    checkpoint::CreateCheckpointDir(dir);
    ps::SaveShardStore(owner_->owned(), layout_.index, step,
                       dir + "/" + checkpoint::ServerShardFile(layout_.index));
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

void TrainerRole::WriteCheckpoint(const std::string& dir, int64_t step) {
  if (service_) service_->SaveShards(step, dir);
  checkpoint::SaveDenseState(trainer_->model(), trainer_->dense_optimizer(), step,
                             dir + "/" + checkpoint::kDenseStateFile);
  checkpoint::CheckpointManifest manifest;
  manifest.set_step(step);
  manifest.set_config(ConfigToText(config_));
  *manifest.mutable_plan() = layout_.plan;
  manifest.set_num_trainers(layout_.num_trainers());
  manifest.set_num_servers(layout_.num_owners());
  manifest.set_staleness(StalenessBound(config_.distributed()));
  *manifest.mutable_dense_state() = checkpoint::DescribeFile(dir, checkpoint::kDenseStateFile);
  if (!trainer_->replicas().shards().empty()) {
    ps::SaveShardStore(trainer_->replicas(), ps::kTrainerReplica, step,
                       dir + "/" + checkpoint::kReplicaShardFile);
    *manifest.mutable_replicas() = checkpoint::DescribeFile(dir, checkpoint::kReplicaShardFile);
  }
  for (int32_t s = 0; s < layout_.num_owners(); ++s) {
    checkpoint::ServerShardsEntry* entry = manifest.add_servers();
    entry->set_server(s);
    *entry->mutable_file() = checkpoint::DescribeFile(dir, checkpoint::ServerShardFile(s));
  }
  checkpoint::WriteManifest(dir, manifest);  // last: the directory is complete once it is there
}

EvalResult TrainerRole::Evaluate(const std::vector<BatchView>& batches) {
  std::vector<double> probabilities;
  std::vector<float> labels;
  std::string error;
  try {
    trainer_->AppendPredictions(batches, layout_.index, layout_.num_trainers(), &probabilities,
                                &labels);
  } catch (const Error& e) {
    error = e.what();
  }
  return GatherEvaluation(comm_.get(), error, probabilities, labels);
}

void TrainerRole::Finish() {
  trainer_->Flush();
  comm_->AllGather("");  // nobody tells the servers to go while another trainer still works
  if (service_) service_->Shutdown();
  coordinator_.Leave();
}

}  // namespace dlrm::train

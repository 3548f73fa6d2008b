// The trainer role of a multi-process job (DLRM_ROLE=trainer), as an object a host drives:
// the `dlrm` tool, or a host program through the C ABI. It joins the job (listen,
// rendezvous), connects to the servers and the other trainers, optionally restores a
// sharded checkpoint, and then trains: through DataParallelTrainer when the job has
// embedding servers, through ModelParallelTrainer (the trainers own the shards, the Neo
// layout) when it has none.
//
//   TrainerRole t(ClusterEnvFromEnvironment(), config);
//   for (...) { t.trainer().Enqueue(part); ... t.trainer().TrainStep(); }
//   t.Checkpoint("/ckpt/step-1000");   // collective: every trainer calls it
//   t.Finish();                        // collective: servers exit when all trainers have
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/cluster/cluster_env.h"
#include "engine/cluster/job_layout.h"
#include "engine/cluster/rendezvous.h"
#include "engine/collective/communicator.h"
#include "engine/config/dlrm.pb.h"
#include "engine/core/metrics.h"
#include "engine/core/thread_pool.h"
#include "engine/net/context.h"
#include "engine/net/endpoint.h"
#include "engine/ps/client.h"
#include "engine/train/data_parallel_trainer.h"
#include "engine/train/model_parallel_trainer.h"
#include "engine/train/sync_trainer.h"

namespace dlrm::train {

class TrainerRole {
 public:
  // Makes the trainers' collectives once the rendezvous has told this trainer its index
  // among the trainers and their number: how a host plugs in its own (MPI, Spark).
  using CommunicatorFactory =
      std::function<std::unique_ptr<collective::Communicator>(int32_t rank, int32_t world_size)>;

  // env.role must be trainer; config must pass ValidateConfig (kInvalidArgument naming the
  // field otherwise). The role owns its transport context and its thread pool
  // (config.num_threads). restore_dir: a checkpoint to resume from (empty: start fresh).
  // make_communicator: null uses the transport (NetCommunicator, or Gloo by env).
  // devices: the device side of the step for config.device() and the NCCL communicator
  // of DLRM_COLLECTIVE=nccl (trainer_backend.h; engine/device_backends.h has every device
  // this libdlrm was built with); without them the trainer computes on the CPU and
  // refuses any other device or collective by name.
  TrainerRole(const cluster::ClusterEnv& env, const config::DlrmConfig& config,
              const std::string& restore_dir = "",
              const CommunicatorFactory& make_communicator = nullptr,
              const TrainerDevices& devices = {});
  ~TrainerRole();

  SyncTrainer& trainer() { return *trainer_; }
  int32_t trainer_rank() const { return layout_.index; }
  int32_t num_trainers() const { return layout_.num_trainers(); }
  int32_t num_servers() const { return layout_.num_servers(); }
  const cluster::JobLayout& layout() const { return layout_; }

  // Collective: log loss and AUC over `batches` (the same list on every trainer) with
  // every update so far applied. Trainer r predicts every r-th batch; the predictions
  // are all-gathered, so the work is split and every trainer gets the result.
  EvalResult Evaluate(const std::vector<BatchView>& batches);

  // Collective over the trainers: writes a sharded checkpoint of the current step to dir
  // (every shard owner its shards, trainer 0 the dense state, replicas and, last, the
  // manifest). Returns when the checkpoint is complete.
  void Checkpoint(const std::string& dir);
  // Collective: waits for every update, tells the servers this trainer is done and
  // leaves the job. The destructor of a trainer that did not finish leaves as failed
  // (CoordinatorClient::LeaveFailed), which ends the job. Once the coordinator reports a
  // dead peer (or is gone itself), every call that waits on a peer fails at once with
  // kNetwork naming it (cluster_env.h Liveness).
  void Finish();
  // Leaves the job because this trainer failed with `failure` (a host's own error): the
  // coordinator tells every other process at once. Best effort; the destructor does it
  // with a generic reason for a trainer that neither finished nor left.
  void LeaveFailed(const std::string& failure) { coordinator_.LeaveFailed(failure); }

 private:
  // config with env's device (DLRM_DEVICE) in place, once it passed ValidateConfig and
  // suits env (DLRM_COLLECTIVE=nccl: a GPU).
  static config::DlrmConfig Validated(const cluster::ClusterEnv& env,
                                      const config::DlrmConfig& config);
  // Collective over the trainers of a job without servers: each planned the shards from
  // its own config, whose device (a per-process field the coordinator does not compare)
  // decides whether a table may be cut into row-wise pieces. kInvalidArgument on every
  // trainer alike, naming two that differ, unless all hold the same plan.
  void RequireOnePlan();
  std::unique_ptr<collective::Communicator> MakeCommunicator(const CommunicatorFactory& factory,
                                                             const TrainerDevices& devices);
  // The transport's own communicator, or Gloo's over it (env_.collective).
  std::unique_ptr<collective::Communicator> MakeHostCommunicator();
  // The trainer of the layout (servers: DataParallelTrainer over a service to them; none:
  // ModelParallelTrainer).
  void MakeTrainer(const TrainerDevices& devices);
  void Restore(const std::string& restore_dir);
  // Checkpoint's parts: the lead trainer readies the directory (BeginCheckpointDir; the
  // outcome, "" or why it failed); this trainer's own shards where it owns some (the
  // same); the lead trainer's files: the servers' shards, the dense state, the replicas
  // and, last, the manifest.
  static std::string BeginCheckpoint(const std::string& dir);
  std::string SaveOwnedShards(const std::string& dir, int64_t step);
  void WriteCheckpoint(const std::string& dir, int64_t step);

  const config::DlrmConfig config_;
  const cluster::ClusterEnv env_;
  net::Context context_;
  ThreadPool pool_;
  // Every endpoint's options: one routing id, and the signal coordinator_ raises when a
  // peer died, ending all waits.
  const cluster::MemberTransport member_;
  net::Endpoint listener_;
  cluster::CoordinatorClient coordinator_;
  cluster::JobLayout layout_;
  std::unique_ptr<collective::Communicator> comm_;
  std::unique_ptr<ps::RemoteEmbeddingService> service_;  // null when the trainers own shards
  std::unique_ptr<SyncTrainer> trainer_;
  ModelParallelTrainer* owner_ = nullptr;  // trainer_, when the trainers own the shards
};

}  // namespace dlrm::train

// `dlrm train` as one process of a multi-process job (DLRM_ROLE set): the coordinator, an
// embedding server, or a trainer that trains its part of every global batch.
#include <gflags/gflags.h>
#include <glog/logging.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "engine/checkpoint/sharded_checkpoint.h"
#include "engine/cluster/cluster_env.h"
#include "engine/cluster/coordinator.h"
#include "engine/config/config.h"
#include "engine/core/status.h"
#include "engine/core/stopwatch.h"
#include "engine/core/thread_pool.h"
#include "engine/data/prefetcher.h"
#include "engine/device_backends.h"
#include "engine/net/context.h"
#include "engine/ps/server_role.h"
#include "engine/train/trainer_role.h"
#include "tools/commands.h"
#include "tools/train_data.h"

DECLARE_string(config);
DECLARE_string(train);
DECLARE_string(test);
DECLARE_int64(batch_size);
DECLARE_int64(eval_batch_size);
DECLARE_int32(epochs);
DECLARE_int32(threads);
DECLARE_double(log_every_seconds);
DECLARE_bool(skip_malformed);
DECLARE_string(device);

DEFINE_string(mode, "", "multi-process jobs: sync or hybrid (default: the config's)");
DEFINE_int64(staleness, 0, "multi-process jobs: hybrid's staleness bound (0: the config's)");
DEFINE_int64(max_steps, 0, "stop after this many global steps (0: no limit)");
DEFINE_string(checkpoint_dir, "", "multi-process jobs: write sharded checkpoints under here");
DEFINE_int64(checkpoint_every, 0, "steps between sharded checkpoints (0: only at the end)");
DEFINE_string(restore, "",
              "multi-process jobs: resume from this checkpoint directory, or from the latest "
              "complete step-N checkpoint under it");
DEFINE_int64(warmup_steps, 10, "steps left out of the reported steady-state samples/s");

namespace dlrm::tools {
namespace {

config::DlrmConfig JobConfig() {
  if (FLAGS_config.empty()) ThrowInvalid("train needs --config");
  config::DlrmConfig config = LoadConfigFile(FLAGS_config);
  if (FLAGS_threads >= 0) config.set_num_threads(FLAGS_threads);
  config::DistributedConfig* d = config.mutable_distributed();
  if (FLAGS_mode == "sync") {
    d->set_mode(config::DistributedConfig::SYNC);
  } else if (FLAGS_mode == "hybrid") {
    d->set_mode(config::DistributedConfig::HYBRID);
  } else if (!FLAGS_mode.empty()) {
    ThrowInvalid("--mode must be sync or hybrid, got \"", FLAGS_mode, "\"");
  }
  if (FLAGS_staleness != 0) d->set_staleness(FLAGS_staleness);
  ValidateConfig(config);
  return config;
}

// The checkpoint to restore: `path` itself if it holds a MANIFEST, else the complete
// step-N directory under it with the largest N; kNotFound if there is none.
std::string CheckpointToRestore(const std::string& path) {
  namespace fs = std::filesystem;
  if (fs::exists(fs::path(path) / checkpoint::kManifestFile)) return path;
  std::string best;
  int64_t best_step = -1;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(path, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("step-", 0) != 0 || !fs::exists(entry.path() / checkpoint::kManifestFile))
      continue;
    const int64_t step = std::atoll(name.c_str() + 5);
    if (step > best_step) {
      best_step = step;
      best = entry.path().string();
    }
  }
  if (best.empty())
    Throw(StatusCode::kNotFound, "no complete checkpoint in \"", path,
          "\" (neither a MANIFEST nor a step-N directory with one)");
  return best;
}

std::string CheckpointDir(int64_t step) {
  return FLAGS_checkpoint_dir + "/step-" + std::to_string(step);
}

int TrainJob(train::TrainerRole& job, const config::DlrmConfig& config);

int TrainerMain(const cluster::ClusterEnv& env, const config::DlrmConfig& config,
                const std::string& restore) {
  if (FLAGS_train.empty()) ThrowInvalid("train needs --train");
  train::TrainerRole job(env, config, restore, nullptr, BuiltTrainerDevices());
  try {
    return TrainJob(job, config);
  } catch (const Error& e) {
    job.LeaveFailed(e.what());  // every other process of the job learns why at once
    throw;
  }
}

// One trainer's run of the job: its steps, periodic checkpoints and progress lines, and
// the summary (lead trainer only).
class TrainLoop {
 public:
  TrainLoop(train::TrainerRole& job, const config::DlrmConfig& config)
      : job_(job),
        trainer_(job.trainer()),
        config_(config),
        rank_(job.trainer_rank()),
        lead_(rank_ == 0),
        resumed_(trainer_.step()) {
    const int32_t ranks = job.num_trainers();
    if (FLAGS_batch_size <= 0 || FLAGS_batch_size % ranks != 0)
      ThrowInvalid("--batch_size ", FLAGS_batch_size, " must be a positive multiple of the ", ranks,
                   " trainers");
    part_ = FLAGS_batch_size / ranks;
    if (lead_)
      LOG(INFO) << "job: " << ranks << " trainers, " << job.num_servers() << " servers, mode "
                << config::DistributedConfig::Mode_Name(config.distributed().mode())
                << " (staleness bound " << StalenessBound(config.distributed())
                << "), global batch " << FLAGS_batch_size << ", lookahead "
                << Lookahead(config.distributed()) << (resumed_ ? ", resuming at step " : "")
                << (resumed_ ? std::to_string(resumed_) : "");
  }

  // Every epoch's batches (from where a restored checkpoint left off), this rank's part of
  // each queued `lookahead` steps ahead; then the queue drained.
  void Train() {
    const int64_t lookahead = Lookahead(config_.distributed());
    int64_t global_index = 0;
    bool done = false;
    for (int epoch = 0; epoch < FLAGS_epochs && !done; ++epoch) {
      auto reader = std::make_shared<CriteoTsvReader>(
          FLAGS_train, ReaderOptions(config_, FLAGS_batch_size, FLAGS_skip_malformed));
      Prefetcher prefetch([reader](OwnedBatch* b) { return reader->Next(b); }, 4);
      OwnedBatch batch;
      while (!done && prefetch.Next(&batch)) {
        if (batch.batch_size != FLAGS_batch_size) {
          ++dropped_;  // trainers need equal parts: the short last batch is left out
          continue;
        }
        if (global_index++ < resumed_) continue;  // trained before the checkpoint
        const OwnedBatch mine = SliceBatch(batch.view(), rank_ * part_, (rank_ + 1) * part_);
        trainer_.Enqueue(mine.view());
        if (static_cast<int64_t>(trainer_.queued()) > lookahead) TrainOne();
        done = FLAGS_max_steps > 0 &&
               trainer_.step() + static_cast<int64_t>(trainer_.queued()) >= FLAGS_max_steps;
      }
    }
    while (trainer_.queued() > 0) TrainOne();
  }

  void PrintSummary() const {
    if (!lead_) return;
    const double elapsed = SecondsSince(start_), steady = SecondsSince(steady_start_);
    std::printf("trained %lld steps (to step %lld), %lld samples in %.1fs: %.0f samples/s",
                static_cast<long long>(steps_), static_cast<long long>(trainer_.step()),
                static_cast<long long>(steps_ * FLAGS_batch_size), elapsed,
                steps_ * FLAGS_batch_size / elapsed);
    if (steady_steps_ > 0)
      std::printf(", steady %.0f samples/s (%.2f ms/step after %lld warm-up steps)",
                  steady_steps_ * FLAGS_batch_size / steady, 1000 * steady / steady_steps_,
                  static_cast<long long>(FLAGS_warmup_steps));
    std::printf("\n");
    if (dropped_ > 0)
      std::printf("left out %lld short batches\n", static_cast<long long>(dropped_));
    const train::WireBytes& wire = trainer_.wire_bytes();
    if (wire.steps > 0)
      std::printf(
          "wire (%s): trainer 0 sent %.0f and received %.0f payload bytes per step\n",
          config::DistributedConfig::WirePrecision_Name(config_.distributed().wire_precision())
              .c_str(),
          static_cast<double>(wire.sent) / static_cast<double>(wire.steps),
          static_cast<double>(wire.received) / static_cast<double>(wire.steps));
    std::fflush(stdout);
  }

  // The last checkpoint (unless the last step wrote one), the evaluation, the job's end.
  void Finish() {
    if (!FLAGS_checkpoint_dir.empty() &&
        (FLAGS_checkpoint_every <= 0 || trainer_.step() % FLAGS_checkpoint_every != 0))
      job_.Checkpoint(CheckpointDir(trainer_.step()));
    if (!FLAGS_test.empty()) {
      const std::vector<OwnedBatch> batches =
          LoadBatches(FLAGS_test, config_, FLAGS_eval_batch_size, FLAGS_skip_malformed);
      const EvalResult result = job_.Evaluate(ViewsOf(batches));
      if (lead_) ReportEval(FLAGS_test, result);
    }
    job_.Finish();
  }

 private:
  void TrainOne() {
    window_loss_ += trainer_.TrainStep();
    ++steps_;
    ++window_steps_;
    if (steps_ == FLAGS_warmup_steps) steady_start_ = Clock::now();
    if (steps_ > FLAGS_warmup_steps) ++steady_steps_;
    if (FLAGS_checkpoint_every > 0 && !FLAGS_checkpoint_dir.empty() &&
        trainer_.step() % FLAGS_checkpoint_every == 0)
      job_.Checkpoint(CheckpointDir(trainer_.step()));
    if (lead_ && SecondsSince(last_log_) >= FLAGS_log_every_seconds) {
      std::printf("step %lld  samples/s %.0f  loss %.5f\n", static_cast<long long>(trainer_.step()),
                  steps_ * FLAGS_batch_size / SecondsSince(start_), window_loss_ / window_steps_);
      std::fflush(stdout);
      window_loss_ = 0;
      window_steps_ = 0;
      last_log_ = Clock::now();
    }
  }

  train::TrainerRole& job_;
  train::SyncTrainer& trainer_;
  const config::DlrmConfig& config_;
  const int32_t rank_;
  const bool lead_;
  const int64_t resumed_;  // the step a restored checkpoint left off at
  int64_t part_ = 0;       // samples of each global batch this rank trains
  Clock::time_point start_ = Clock::now(), steady_start_ = start_, last_log_ = start_;
  int64_t steps_ = 0, steady_steps_ = 0, window_steps_ = 0, dropped_ = 0;
  double window_loss_ = 0;
};

// Trains, checkpoints and evaluates as the flags say, then finishes the job.
int TrainJob(train::TrainerRole& job, const config::DlrmConfig& config) {
  TrainLoop loop(job, config);
  loop.Train();
  loop.PrintSummary();
  loop.Finish();
  return 0;
}

}  // namespace

bool DistributedRoleFromEnvironment() {
  return cluster::ProcessEnvironment()("DLRM_ROLE").has_value();
}

int DistributedTrainCommand() {
  cluster::ClusterEnv env = cluster::ClusterEnvFromEnvironment();
  // A trainer's --device, as DLRM_DEVICE (which it overrides): its config's device, where
  // cuda:local names the GPU of its DLRM_LOCAL_RANK. Servers compute on the CPU whatever
  // either says (the device is a field of each process).
  if (!FLAGS_device.empty()) cluster::SetTrainerDevice(FLAGS_device, "--device", &env);
  const std::string restore = FLAGS_restore.empty() || env.role == cluster::ROLE_COORDINATOR
                                  ? ""
                                  : CheckpointToRestore(FLAGS_restore);
  if (env.role != cluster::ROLE_TRAINER) {
    const auto config = [] { return JobConfig(); };
    ps::RunServingRole(env, config, restore);
    return 0;
  }
  return TrainerMain(env, JobConfig(), restore);
}

}  // namespace dlrm::tools

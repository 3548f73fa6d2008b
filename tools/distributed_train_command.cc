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
  train::TrainerRole job(env, config, restore);
  try {
    return TrainJob(job, config);
  } catch (const Error& e) {
    job.LeaveFailed(e.what());  // every other process of the job learns why at once
    throw;
  }
}

// Trains, checkpoints and evaluates as the flags say, then finishes the job.
int TrainJob(train::TrainerRole& job, const config::DlrmConfig& config) {
  train::DataParallelTrainer& trainer = job.trainer();
  const int32_t ranks = job.num_trainers(), rank = job.trainer_rank();
  if (FLAGS_batch_size <= 0 || FLAGS_batch_size % ranks != 0)
    ThrowInvalid("--batch_size ", FLAGS_batch_size, " must be a positive multiple of the ", ranks,
                 " trainers");
  const int64_t part = FLAGS_batch_size / ranks;
  const bool lead = rank == 0;
  const int64_t resumed = trainer.step();
  if (lead)
    LOG(INFO) << "job: " << ranks << " trainers, " << job.num_servers() << " servers, mode "
              << config::DistributedConfig::Mode_Name(config.distributed().mode())
              << " (staleness bound " << StalenessBound(config.distributed()) << "), global batch "
              << FLAGS_batch_size << ", lookahead " << Lookahead(config.distributed())
              << (resumed ? ", resuming at step " : "") << (resumed ? std::to_string(resumed) : "");

  auto start = Clock::now(), steady_start = start, last_log = start;
  int64_t steps = 0, steady_steps = 0, window_steps = 0;
  double window_loss = 0;
  auto train_one = [&] {
    window_loss += trainer.TrainStep();
    ++steps;
    ++window_steps;
    if (steps == FLAGS_warmup_steps) steady_start = Clock::now();
    if (steps > FLAGS_warmup_steps) ++steady_steps;
    if (FLAGS_checkpoint_every > 0 && !FLAGS_checkpoint_dir.empty() &&
        trainer.step() % FLAGS_checkpoint_every == 0)
      job.Checkpoint(CheckpointDir(trainer.step()));
    if (lead && SecondsSince(last_log) >= FLAGS_log_every_seconds) {
      std::printf("step %lld  samples/s %.0f  loss %.5f\n", static_cast<long long>(trainer.step()),
                  steps * FLAGS_batch_size / SecondsSince(start), window_loss / window_steps);
      std::fflush(stdout);
      window_loss = 0;
      window_steps = 0;
      last_log = Clock::now();
    }
  };

  int64_t global_index = 0, dropped = 0;
  const int64_t lookahead = Lookahead(config.distributed());
  bool done = false;
  for (int epoch = 0; epoch < FLAGS_epochs && !done; ++epoch) {
    auto reader = std::make_shared<CriteoTsvReader>(
        FLAGS_train, ReaderOptions(config, FLAGS_batch_size, FLAGS_skip_malformed));
    Prefetcher prefetch([reader](OwnedBatch* b) { return reader->Next(b); }, 4);
    OwnedBatch batch;
    while (!done && prefetch.Next(&batch)) {
      if (batch.batch_size != FLAGS_batch_size) {
        ++dropped;  // trainers need equal parts: the short last batch is left out
        continue;
      }
      if (global_index++ < resumed) continue;  // trained before the checkpoint
      const OwnedBatch mine = SliceBatch(batch.view(), rank * part, (rank + 1) * part);
      trainer.Enqueue(mine.view());
      if (static_cast<int64_t>(trainer.queued()) > lookahead) train_one();
      done = FLAGS_max_steps > 0 &&
             trainer.step() + static_cast<int64_t>(trainer.queued()) >= FLAGS_max_steps;
    }
  }
  while (trainer.queued() > 0) train_one();
  const double elapsed = SecondsSince(start);
  const double steady = SecondsSince(steady_start);
  if (lead) {
    std::printf("trained %lld steps (to step %lld), %lld samples in %.1fs: %.0f samples/s",
                static_cast<long long>(steps), static_cast<long long>(trainer.step()),
                static_cast<long long>(steps * FLAGS_batch_size), elapsed,
                steps * FLAGS_batch_size / elapsed);
    if (steady_steps > 0)
      std::printf(", steady %.0f samples/s (%.2f ms/step after %lld warm-up steps)",
                  steady_steps * FLAGS_batch_size / steady, 1000 * steady / steady_steps,
                  static_cast<long long>(FLAGS_warmup_steps));
    std::printf("\n");
    if (dropped > 0) std::printf("left out %lld short batches\n", static_cast<long long>(dropped));
    const train::DataParallelTrainer::WireBytes& wire = trainer.wire_bytes();
    if (wire.steps > 0)
      std::printf(
          "wire (%s): trainer 0 sent %.0f and received %.0f payload bytes per step\n",
          config::DistributedConfig::WirePrecision_Name(config.distributed().wire_precision())
              .c_str(),
          static_cast<double>(wire.sent) / static_cast<double>(wire.steps),
          static_cast<double>(wire.received) / static_cast<double>(wire.steps));
    std::fflush(stdout);
  }
  if (!FLAGS_checkpoint_dir.empty() &&
      (FLAGS_checkpoint_every <= 0 || trainer.step() % FLAGS_checkpoint_every != 0))
    job.Checkpoint(CheckpointDir(trainer.step()));
  if (!FLAGS_test.empty()) {
    const std::vector<OwnedBatch> batches =
        LoadBatches(FLAGS_test, config, FLAGS_eval_batch_size, FLAGS_skip_malformed);
    const EvalResult result = job.Evaluate(ViewsOf(batches));
    if (lead) ReportEval(FLAGS_test, result);
  }
  job.Finish();
  return 0;
}

}  // namespace

bool DistributedRoleFromEnvironment() {
  return cluster::ProcessEnvironment()("DLRM_ROLE").has_value();
}

int DistributedTrainCommand() {
  const cluster::ClusterEnv env = cluster::ClusterEnvFromEnvironment();
  const std::string restore = FLAGS_restore.empty() || env.role == cluster::ROLE_COORDINATOR
                                  ? ""
                                  : CheckpointToRestore(FLAGS_restore);
  if (env.role != cluster::ROLE_TRAINER) {
    ps::RunServingRole(env, JobConfig, restore);
    return 0;
  }
  return TrainerMain(env, JobConfig(), restore);
}

}  // namespace dlrm::tools

// The extern "C" shim over multi-process training: the serving roles (ps/server_role.h),
// and the trainer role (train/trainer_role.h) with the built-in or a host-supplied
// all-gather (collective/host_communicator.h). Argument checks only; no engine logic.
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "capi/capi_internal.h"
#include "dlrm/dlrm.h"
#include "engine/cluster/cluster_env.h"
#include "engine/collective/host_communicator.h"
#include "engine/config/config.h"
#include "engine/core/status.h"
#include "engine/device_backends.h"
#include "engine/ps/server_role.h"
#include "engine/train/trainer_role.h"

using namespace dlrm::capi;  // the shim's helpers (capi_internal.h)

struct dlrm_gather {
  std::vector<std::optional<std::string>>* parts;  // by rank; HostCommunicator's
};

struct dlrm_trainer {
  std::unique_ptr<dlrm::train::TrainerRole> impl;
  // The last failed call's error: why the trainer leaves if it is destroyed unfinished.
  std::string last_error;
};

namespace {

// The cluster settings as text (NULL: the process environment).
dlrm::cluster::ClusterEnv ClusterFrom(const char* cluster) {
  if (cluster == nullptr) return dlrm::cluster::ClusterEnvFromEnvironment();
  return dlrm::cluster::ParseClusterEnv(dlrm::cluster::ParseClusterSettings(cluster));
}

dlrm::config::DlrmConfig ConfigFrom(const char* config_text) {
  RequireNotNull(config_text, "config_text");
  dlrm::config::DlrmConfig config = dlrm::ParseConfigText(config_text);
  dlrm::ValidateConfig(config);
  return config;
}

std::string DirFrom(const char* dir) { return dir == nullptr ? "" : dir; }

dlrm::train::TrainerRole& TrainerOf(dlrm_trainer* trainer) {
  RequireNotNull(trainer, "trainer");
  if (!trainer->impl) dlrm::ThrowInvalid("trainer handle is not valid");
  return *trainer->impl;
}

// Guard for a call on a trainer: the trainer's last_error becomes its error, or "" when
// it succeeds (a recovered error is not why a trainer leaves later).
template <typename Fn>
dlrm_status TrainerGuard(dlrm_trainer* trainer, Fn&& fn) {
  return Guard([&] {
    try {
      fn(TrainerOf(trainer));
      trainer->last_error.clear();
    } catch (const std::exception& e) {
      if (trainer != nullptr) trainer->last_error = e.what();
      throw;
    }
  });
}

}  // namespace

extern "C" {

DLRM_API dlrm_status dlrm_run_role(const char* config_text, const char* cluster,
                                   const char* restore_dir) {
  return Guard([&] {
    dlrm::ps::RunServingRole(
        ClusterFrom(cluster), [&] { return ConfigFrom(config_text); }, DirFrom(restore_dir));
  });
}

DLRM_API dlrm_status dlrm_gather_put(dlrm_gather* result, int32_t rank, const void* data,
                                     int64_t num_bytes) {
  return Guard([&] {
    RequireNotNull(result, "result");
    std::vector<std::optional<std::string>>& parts = *result->parts;
    if (rank < 0 || rank >= static_cast<int32_t>(parts.size()))
      dlrm::ThrowInvalid("rank ", rank, " is outside [0, ", parts.size(), ")");
    if (num_bytes < 0) dlrm::ThrowInvalid("num_bytes is negative (", num_bytes, ")");
    if (num_bytes > 0) RequireNotNull(data, "data");
    if (parts[rank]) dlrm::ThrowInvalid("rank ", rank, "'s contribution is put twice");
    parts[rank] = std::string(static_cast<const char*>(data), static_cast<size_t>(num_bytes));
  });
}

DLRM_API dlrm_status dlrm_trainer_create(const char* config_text, const char* cluster,
                                         const char* restore_dir, dlrm_allgather_fn allgather,
                                         void* user_data, dlrm_trainer** out) {
  return Guard([&] {
    RequireNotNull(out, "out");
    auto handle = std::make_unique<dlrm_trainer>();
    dlrm::train::TrainerRole::CommunicatorFactory factory;
    if (allgather != nullptr)
      factory = [allgather, user_data](int32_t rank, int32_t size) {
        return std::make_unique<dlrm::collective::HostCommunicator>(
            [allgather, user_data](const std::string& contribution,
                                   std::vector<std::optional<std::string>>* parts) {
              dlrm_gather result{parts};
              return allgather(user_data, contribution.data(),
                               static_cast<int64_t>(contribution.size()), &result);
            },
            rank, size);
      };
    const dlrm::config::DlrmConfig config = ConfigFrom(config_text);
    const dlrm::cluster::ClusterEnv env = ClusterFrom(cluster);
    handle->impl = std::make_unique<dlrm::train::TrainerRole>(env, config, DirFrom(restore_dir),
                                                              factory, dlrm::BuiltTrainerDevices());
    *out = handle.release();  // ownership passes to the caller until dlrm_trainer_destroy
  });
}

DLRM_API void dlrm_trainer_destroy(dlrm_trainer* trainer) {
  std::unique_ptr<dlrm_trainer> owned(trainer);
  // Unfinished after a failed call (a host that gives up on an error): the other peers
  // learn that error at once. A no-op for a trainer that finished; never throws.
  try {
    if (owned && owned->impl && !owned->last_error.empty())
      owned->impl->LeaveFailed("its last call failed: " + owned->last_error);
  } catch (...) {  // best effort: the destructor still leaves, with its generic reason
  }
}

DLRM_API dlrm_status dlrm_trainer_info(dlrm_trainer* trainer, int32_t* rank, int32_t* num_trainers,
                                       int64_t* step) {
  return Guard([&] {
    dlrm::train::TrainerRole& t = TrainerOf(trainer);
    if (rank) *rank = t.trainer_rank();
    if (num_trainers) *num_trainers = t.num_trainers();
    if (step) *step = t.trainer().step();
  });
}

DLRM_API dlrm_status dlrm_trainer_enqueue(dlrm_trainer* trainer, const dlrm_batch* part) {
  return TrainerGuard(
      trainer, [&](dlrm::train::TrainerRole& t) { t.trainer().Enqueue(ToView(part, "part")); });
}

DLRM_API dlrm_status dlrm_trainer_train_step(dlrm_trainer* trainer, float* loss_out) {
  return TrainerGuard(trainer, [&](dlrm::train::TrainerRole& t) {
    const float loss = t.trainer().TrainStep();
    if (loss_out) *loss_out = loss;
  });
}

DLRM_API dlrm_status dlrm_trainer_evaluate(dlrm_trainer* trainer, const dlrm_batch* batches,
                                           size_t num_batches, dlrm_eval_result* out) {
  return TrainerGuard(trainer, [&](dlrm::train::TrainerRole& t) {
    RequireNotNull(out, "out");
    WriteEvalResult(t.Evaluate(ToViews(batches, num_batches)), out);
  });
}

DLRM_API dlrm_status dlrm_trainer_checkpoint(dlrm_trainer* trainer, const char* dir) {
  return TrainerGuard(trainer, [&](dlrm::train::TrainerRole& t) {
    RequireNotNull(dir, "dir");
    t.Checkpoint(dir);
  });
}

DLRM_API dlrm_status dlrm_trainer_finish(dlrm_trainer* trainer) {
  return TrainerGuard(trainer, [&](dlrm::train::TrainerRole& t) { t.Finish(); });
}

}  // extern "C"

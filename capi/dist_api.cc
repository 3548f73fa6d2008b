// The extern "C" shim over multi-process training (engine/dist): the server and
// coordinator roles, and the trainer with the built-in or a host-supplied all-gather.
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "capi/capi_internal.h"
#include "dlrm/dlrm.h"
#include "engine/config/config.h"
#include "engine/core/status.h"
#include "engine/core/thread_pool.h"
#include "engine/cluster/cluster_env.h"
#include "engine/collective/communicator.h"
#include "engine/cluster/coordinator.h"
#include "engine/train/trainer_role.h"
#include "engine/ps/server_role.h"
#include "engine/net/context.h"

using dlrm::capi::Guard;
using dlrm::capi::RequireNotNull;
using dlrm::capi::ToView;
using dlrm::capi::ToViews;
using dlrm::capi::WriteEvalResult;

struct dlrm_gather {
  std::vector<std::optional<std::string>> parts;  // by rank
};

struct dlrm_trainer {
  dlrm::config::DlrmConfig config;
  std::unique_ptr<dlrm::ThreadPool> pool;
  std::unique_ptr<dlrm::net::Context> context;
  std::unique_ptr<dlrm::dist::TrainerRole> impl;
};

namespace {

// "KEY=VALUE" lines (blank lines and # comments allowed) -> the cluster settings; NULL
// reads the process environment.
dlrm::dist::ClusterEnv ClusterFrom(const char* cluster) {
  if (cluster == nullptr) return dlrm::dist::ClusterEnvFromEnvironment();
  std::map<std::string, std::string> vars;
  std::istringstream lines(cluster);
  std::string line;
  int number = 0;
  while (std::getline(lines, line)) {
    ++number;
    if (line.empty() || line[0] == '#') continue;
    const size_t eq = line.find('=');
    if (eq == std::string::npos || eq == 0)
      dlrm::ThrowInvalid("cluster line ", number, " is not KEY=VALUE: \"", line, "\"");
    const std::string key = line.substr(0, eq);
    if (key.rfind("DLRM_", 0) != 0)
      dlrm::ThrowInvalid("cluster line ", number, ": \"", key, "\" is not a DLRM_* setting");
    if (!vars.emplace(key, line.substr(eq + 1)).second)
      dlrm::ThrowInvalid("cluster line ", number, ": ", key, " is set twice");
  }
  return dlrm::dist::ParseClusterEnv([&](const std::string& name) -> std::optional<std::string> {
    const auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  });
}

dlrm::config::DlrmConfig ConfigFrom(const char* config_text) {
  RequireNotNull(config_text, "config_text");
  dlrm::config::DlrmConfig config = dlrm::ParseConfigText(config_text);
  dlrm::ValidateConfig(config);
  return config;
}

std::string DirFrom(const char* dir) { return dir == nullptr ? "" : dir; }

// The trainers' collective through the host's all-gather.
class HostCommunicator : public dlrm::dist::Communicator {
 public:
  HostCommunicator(dlrm_allgather_fn fn, void* user_data, int32_t rank, int32_t world_size)
      : fn_(fn), user_data_(user_data), rank_(rank), world_size_(world_size) {}
  int32_t rank() const override { return rank_; }
  int32_t world_size() const override { return world_size_; }

  std::vector<std::string> AllGather(const std::string& contribution) override {
    dlrm_gather result;
    result.parts.resize(world_size_);
    const int32_t rc = fn_(user_data_, contribution.data(),
                           static_cast<int64_t>(contribution.size()), &result);
    if (rc != 0)
      dlrm::Throw(dlrm::StatusCode::kNetwork, "the host's all-gather returned ", rc,
                  " on trainer ", rank_);
    std::vector<std::string> all;
    for (int32_t r = 0; r < world_size_; ++r) {
      if (!result.parts[r])
        dlrm::Throw(dlrm::StatusCode::kNetwork, "the host's all-gather gave trainer ", rank_,
                    " no contribution of rank ", r, " (dlrm_gather_put was not called for it)");
      all.push_back(std::move(*result.parts[r]));
    }
    if (all[rank_] != contribution)
      dlrm::Throw(dlrm::StatusCode::kNetwork, "the host's all-gather returned other bytes as ",
                  "trainer ", rank_, "'s own contribution");
    return all;
  }

 private:
  dlrm_allgather_fn fn_;
  void* user_data_;
  int32_t rank_, world_size_;
};

dlrm::dist::TrainerRole& TrainerOf(dlrm_trainer* trainer) {
  RequireNotNull(trainer, "trainer");
  if (!trainer->impl) dlrm::ThrowInvalid("trainer handle is not valid");
  return *trainer->impl;
}

}  // namespace

extern "C" {

DLRM_API dlrm_status dlrm_run_role(const char* config_text, const char* cluster,
                                   const char* restore_dir) {
  return Guard([&] {
    const dlrm::dist::ClusterEnv env = ClusterFrom(cluster);
    dlrm::net::Context context;
    if (env.role == dlrm::net::ROLE_COORDINATOR) {
      dlrm::dist::RunCoordinator(context, env);
    } else if (env.role == dlrm::net::ROLE_SERVER) {
      dlrm::dist::RunEmbeddingServer(context, env, ConfigFrom(config_text), DirFrom(restore_dir));
    } else {
      dlrm::ThrowInvalid("dlrm_run_role runs the coordinator or a server; DLRM_ROLE is ",
                         dlrm::dist::RoleName(env.role), " (use dlrm_trainer_create)");
    }
  });
}

DLRM_API dlrm_status dlrm_gather_put(dlrm_gather* result, int32_t rank, const void* data,
                                     int64_t num_bytes) {
  return Guard([&] {
    RequireNotNull(result, "result");
    if (rank < 0 || rank >= static_cast<int32_t>(result->parts.size()))
      dlrm::ThrowInvalid("rank ", rank, " is outside [0, ", result->parts.size(), ")");
    if (num_bytes < 0) dlrm::ThrowInvalid("num_bytes is negative (", num_bytes, ")");
    if (num_bytes > 0) RequireNotNull(data, "data");
    if (result->parts[rank]) dlrm::ThrowInvalid("rank ", rank, "'s contribution is put twice");
    result->parts[rank] = std::string(static_cast<const char*>(data),
                                      static_cast<size_t>(num_bytes));
  });
}

DLRM_API dlrm_status dlrm_trainer_create(const char* config_text, const char* cluster,
                                         const char* restore_dir, dlrm_allgather_fn allgather,
                                         void* user_data, dlrm_trainer** out) {
  return Guard([&] {
    RequireNotNull(out, "out");
    auto handle = std::make_unique<dlrm_trainer>();
    handle->config = ConfigFrom(config_text);
    const dlrm::dist::ClusterEnv env = ClusterFrom(cluster);
    handle->pool = std::make_unique<dlrm::ThreadPool>(
        dlrm::ResolveThreadCount(handle->config.num_threads()));
    handle->context = std::make_unique<dlrm::net::Context>();
    dlrm::dist::TrainerRole::CommunicatorFactory factory;
    if (allgather != nullptr)
      factory = [allgather, user_data](int32_t rank, int32_t size) {
        return std::make_unique<HostCommunicator>(allgather, user_data, rank, size);
      };
    handle->impl = std::make_unique<dlrm::dist::TrainerRole>(
        *handle->context, env, handle->config, handle->pool.get(), DirFrom(restore_dir),
        factory);
    *out = handle.release();  // ownership passes to the caller until dlrm_trainer_destroy
  });
}

DLRM_API void dlrm_trainer_destroy(dlrm_trainer* trainer) {
  std::unique_ptr<dlrm_trainer> owned(trainer);
}

DLRM_API dlrm_status dlrm_trainer_info(dlrm_trainer* trainer, int32_t* rank,
                                       int32_t* num_trainers, int64_t* step) {
  return Guard([&] {
    dlrm::dist::TrainerRole& t = TrainerOf(trainer);
    if (rank) *rank = t.trainer_rank();
    if (num_trainers) *num_trainers = t.num_trainers();
    if (step) *step = t.trainer().step();
  });
}

DLRM_API dlrm_status dlrm_trainer_enqueue(dlrm_trainer* trainer, const dlrm_batch* part) {
  return Guard([&] { TrainerOf(trainer).trainer().Enqueue(ToView(part, "part")); });
}

DLRM_API dlrm_status dlrm_trainer_train_step(dlrm_trainer* trainer, float* loss_out) {
  return Guard([&] {
    const float loss = TrainerOf(trainer).trainer().TrainStep();
    if (loss_out) *loss_out = loss;
  });
}

DLRM_API dlrm_status dlrm_trainer_evaluate(dlrm_trainer* trainer, const dlrm_batch* batches,
                                           size_t num_batches, dlrm_eval_result* out) {
  return Guard([&] {
    dlrm::dist::TrainerRole& t = TrainerOf(trainer);
    RequireNotNull(out, "out");
    WriteEvalResult(t.Evaluate(ToViews(batches, num_batches)), out);
  });
}

DLRM_API dlrm_status dlrm_trainer_checkpoint(dlrm_trainer* trainer, const char* dir) {
  return Guard([&] {
    RequireNotNull(dir, "dir");
    TrainerOf(trainer).Checkpoint(dir);
  });
}

DLRM_API dlrm_status dlrm_trainer_finish(dlrm_trainer* trainer) {
  return Guard([&] { TrainerOf(trainer).Finish(); });
}

}  // extern "C"

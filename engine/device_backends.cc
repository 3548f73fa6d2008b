#include "engine/device_backends.h"

#include <utility>

#include "engine/config/config.h"
#include "engine/core/status.h"
#if DLRM_HAVE_CUDA
#include "engine/cuda/backend.h"
#include "engine/cuda/nccl_communicator.h"
#include "engine/cuda/owned_shards.h"
#include "engine/cuda/trainer_backend.h"
#endif

namespace dlrm {
namespace {

bool OnCpu(const config::DlrmConfig& config) {
  return config.device().kind() == config::DeviceConfig::CPU;
}

#if !DLRM_HAVE_CUDA
[[noreturn]] void ThrowBuiltWithoutCuda() {
  Throw(StatusCode::kFailedPrecondition,
        "device.kind is CUDA but this libdlrm was built without CUDA (build it where nvcc is "
        "installed, with DLRM_CUDA=AUTO or ON)");
}
#endif

std::unique_ptr<train::TrainerBackend> MakeTrainerBackendFor(const config::DlrmConfig& config,
                                                             DlrmModel<float>* model,
                                                             ThreadPool* pool) {
  if (OnCpu(config)) return train::MakeCpuTrainerBackend(model, pool);
#if DLRM_HAVE_CUDA
  return cuda::MakeCudaTrainerBackend(config.device().ordinal(), model, config, pool);
#else
  ThrowBuiltWithoutCuda();
#endif
}

std::unique_ptr<train::OwnedShards> MakeOwnedShardsFor(const config::DlrmConfig& config,
                                                       ps::EmbeddingShardStore* store,
                                                       ThreadPool* pool) {
  if (OnCpu(config)) return train::MakeHostOwnedShards(store);
#if DLRM_HAVE_CUDA
  return cuda::MakeCudaOwnedShards(config.device().ordinal(), store, config, pool);
#else
  (void)pool;
  ThrowBuiltWithoutCuda();
#endif
}

std::unique_ptr<collective::Communicator> MakeDeviceCommunicator(
    std::unique_ptr<collective::Communicator> bootstrap, const config::DlrmConfig& config) {
#if DLRM_HAVE_CUDA
  return cuda::MakeNcclCommunicator(std::move(bootstrap), config.device().ordinal());
#else
  (void)bootstrap;
  (void)config;
  ThrowBuiltWithoutCuda();
#endif
}

}  // namespace

std::unique_ptr<train::Backend> MakeDeviceBackend(const config::DlrmConfig& config,
                                                  train::ModelState* state, ThreadPool* pool) {
  if (OnCpu(config)) return train::MakeCpuBackend(state, pool);
#if DLRM_HAVE_CUDA
  return cuda::MakeCudaBackend(config.device().ordinal(), state, config, pool);
#else
  ThrowBuiltWithoutCuda();
#endif
}

train::TrainerDevices BuiltTrainerDevices() {
  return {MakeTrainerBackendFor, MakeDeviceCommunicator, MakeOwnedShardsFor};
}

}  // namespace dlrm

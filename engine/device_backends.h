// The devices this libdlrm was built with, behind the training step's seams: the
// single-process Engine's Backend (train/backend.h), a trainer's TrainerBackend
// (train/trainer_backend.h) and OwnedShards (train/owned_shards.h), with the trainers'
// NCCL communicator. The one place that maps config.device() onto code: the CPU always,
// CUDA where cmake/Cuda.cmake built engine/cuda.
//
// Errors: kFailedPrecondition naming the cause when the configured device cannot be used
// here ("built without CUDA", the CUDA runtime's reason, cuBLASLt missing), never a silent
// CPU fallback; kInvalidArgument for an ordinal with no device.
// Threading: the factories keep no state; what they make is as its header says.
#pragma once

#include <memory>

#include "engine/config/dlrm.pb.h"
#include "engine/core/thread_pool.h"
#include "engine/train/backend.h"
#include "engine/train/trainer_backend.h"

namespace dlrm {

// The Engine's backend for config.device(), computing on `state`.
std::unique_ptr<train::Backend> MakeDeviceBackend(const config::DlrmConfig& config,
                                                  train::ModelState* state, ThreadPool* pool);

// What a trainer is given: the backend of config.device() for its dense step (TrainerRole,
// DataParallelTrainer, ModelParallelTrainer), the compute of the shards it owns (the Neo
// layout: the host store, or the shards in the GPU's memory, cuda/owned_shards.h) and, for
// DLRM_COLLECTIVE=nccl, the NCCL communicator on the trainer's GPU
// (cuda/nccl_communicator.h; kFailedPrecondition naming why NCCL or the device cannot be
// had, or that this libdlrm was built without CUDA).
train::TrainerDevices BuiltTrainerDevices();

}  // namespace dlrm

// The CUDA backend behind the training step's seam (train/backend.h): how the Engine gets a
// device backend for `device { kind: CUDA ordinal: N }`.
//
// State of the backend (issue 13): prediction runs on the device (pooled embeddings in one
// launch, the MLPs on cuBLASLt, the interaction), from device copies of the host's
// parameters that PushState refreshes. Training does not yet: TrainStep refuses with
// kFailedPrecondition, changing nothing, until the backward and the optimizers (kernels
// in this folder) are wired into the step. It never trains on the CPU behind a CUDA config.
//
// Errors: kFailedPrecondition naming the cause (no driver, a driver older than the runtime,
// no device, cuBLASLt missing, training not built yet); kInvalidArgument for an ordinal
// with no device; kInternal for a failing CUDA call, naming it.
// Threading: as train/backend.h; the backend serializes its device work on one stream.
#pragma once

#include <memory>

#include "engine/core/thread_pool.h"
#include "engine/train/backend.h"

namespace dlrm::cuda {

std::unique_ptr<train::Backend> MakeCudaBackend(int ordinal, train::ModelState* state,
                                                ThreadPool* pool);

}  // namespace dlrm::cuda

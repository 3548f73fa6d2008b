// The CUDA backend behind the training step's seam (train/backend.h): how the Engine gets a
// device backend for `device { kind: CUDA ordinal: N }`.
//
// State of the backend (issue 13): the device probe and the pooled embedding forward exist
// (device.h, pooled_embedding.h) and are tested on a device; the backward fused with the
// sparse optimizers, the MLPs, interactions, loss and dense optimizers do not yet. Until
// they do, MakeCudaBackend opens the device, so a machine without one learns the cause,
// and then refuses with kFailedPrecondition saying the CUDA step is not built yet: it never
// trains on the CPU behind a CUDA config.
//
// Errors: kFailedPrecondition naming the cause (no driver, a driver older than the runtime,
// no device, the step not built yet); kInvalidArgument for an ordinal with no device.
#pragma once

#include <memory>

#include "engine/core/thread_pool.h"
#include "engine/train/backend.h"

namespace dlrm::cuda {

std::unique_ptr<train::Backend> MakeCudaBackend(int ordinal, train::ModelState* state,
                                                ThreadPool* pool);

}  // namespace dlrm::cuda

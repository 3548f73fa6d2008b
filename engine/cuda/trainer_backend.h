// The CUDA side of a data-parallel trainer's step (train/trainer_backend.h): the dense
// forward and backward of this rank's part on a device, for `device { kind: CUDA }` in a
// trainer's config.
//
// A call copies in what changed on the host (the dense parameters, after the trainer's
// update or a restore), the step's fetched rows (the distinct rows of the part's ids, one
// small FP32 table per model table) and the part itself (through pinned buffers), pools
// every feature in one launch, runs the network (dense_network.h) with the loss scaled by
// 1 / global_batch, and copies the dense gradient, d_pooled and the loss sum back (every
// copy through pinned buffers the pool's threads fill and empty, host_copy.h): the
// trainer exchanges them with the other ranks and sums them on the host as it does for a
// CPU trainer. One host synchronization per call. The part's sizes change every step (its
// distinct rows do), so steps run eagerly, never as a CUDA graph.
//
// Bits: repeatable run to run (every kernel and GEMM is deterministic); within fp32
// rounding of the CPU trainer (the GEMMs' order is cuBLASLt's).
// Errors: as OpenDevice (kFailedPrecondition naming why no device can be used,
// kInvalidArgument for an ordinal with no device); kInvalidArgument for rows that are not
// FP32 or not one table per model table; kInternal naming a failing CUDA call.
// Threading: one call at a time (the trainer's thread).
#pragma once

#include <memory>

#include "engine/config/dlrm.pb.h"
#include "engine/core/thread_pool.h"
#include "engine/model/dlrm_model.h"
#include "engine/train/trainer_backend.h"

namespace dlrm::cuda {

// `model`: the trainer's host model (borrowed); `config` its validated config; `pool` (may be
// null) copies parts into pinned memory.
std::unique_ptr<train::TrainerBackend> MakeCudaTrainerBackend(int ordinal, DlrmModel<float>* model,
                                                              const config::DlrmConfig& config,
                                                              ThreadPool* pool);

}  // namespace dlrm::cuda

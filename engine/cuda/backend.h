// The CUDA backend behind the training step's seam (train/backend.h): how the Engine gets a
// device backend for `device { kind: CUDA ordinal: N }`.
//
// The step on the device: the batch uploaded (dense, labels, bag offsets, ids, weights);
// the pooled forward of every feature in one launch; the MLPs on cuBLASLt; the
// interaction; BCE; the whole backward into one dense gradient (the CPU's parameter
// layout) and d_pooled; a finite check (CheckFinite: kFailedPrecondition, nothing
// updated); the dense optimizer and the embedding backward fused with the sparse
// optimizer (embedding_backward.h). Parameters and optimizer state live on the device;
// PullState copies them to the host copy only when a step has run since (Save,
// ReadParameter), PushState copies them back (construction, Load, WriteParameter), so a
// checkpoint is the same file as on the CPU. Steps of the same config, seed and batches
// give the same bits run to run; they agree with the CPU within rounding (the GEMMs'
// order is cuBLASLt's). Buffers are reused across steps of one shape; no CUDA graph yet.
// It never trains on the CPU behind a CUDA config.
//
// Errors: kFailedPrecondition naming the cause (no driver, a driver older than the runtime,
// no device, cuBLASLt missing; training diverged); kInvalidArgument for an ordinal with no
// device; kInternal for a failing CUDA call, naming it.
// Threading: as train/backend.h; the backend serializes its device work on one stream.
#pragma once

#include <memory>

#include "engine/core/thread_pool.h"
#include "engine/train/backend.h"

namespace dlrm::cuda {

// `config` is the engine's (validated): the model and both optimizers' kinds.
std::unique_ptr<train::Backend> MakeCudaBackend(int ordinal, train::ModelState* state,
                                                const config::DlrmConfig& config, ThreadPool* pool);

}  // namespace dlrm::cuda

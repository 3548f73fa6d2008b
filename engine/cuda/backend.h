// The CUDA backend behind the training step's seam (train/backend.h): how the Engine gets a
// device backend for `device { kind: CUDA ordinal: N }`.
//
// The step on the device: the batch on the device (batch_staging.h: through pinned
// buffers the pool's threads fill, copied in during the previous step when the Engine
// announced it, else at the start); the pooled forward of every feature in one launch; the MLPs on
// cuBLASLt; the interaction; BCE; the whole backward into one dense gradient (the CPU's parameter
// layout) and d_pooled; a finite count of the loss and every gradient; the dense optimizer
// and the embedding backward fused with the sparse optimizer (embedding_backward.h), both
// skipped on the device when the count is not zero; the loss and the count copied back.
// One host synchronization per step, at its end; CheckFinite then throws
// kFailedPrecondition for a diverged step, which changed nothing. A step whose batch has
// the shape of the step before is replayed as a CUDA graph (step_graph.h) unless
// device.cuda_graph is false; graph and eager steps give the same bits.
// Parameters and optimizer state live on the device; PullState copies them to the host
// copy only when a step has run since (Save, ReadParameter), PushState copies them back
// (construction, Load, WriteParameter), so a checkpoint is the same file as on the CPU.
// DYNAMIC tables are rows as any other (the Engine resolves ids on the host): the rows a
// step admits are copied in before it (RowsChanged) and put back if it fails. An SSD
// table's rows on the device are its cache's slots: those evicted are copied out before
// their write-back to the store (PullRows), those filled copied in (RowsChanged) with the
// table row each holds, which keys a 16-bit slot's stochastic rounding as on the CPU.
// Steps of the same config, seed and batches give the same bits run to run; they agree
// with the CPU within rounding (the GEMMs' order is cuBLASLt's). It never trains on the
// CPU behind a CUDA config.
//
// Errors: kFailedPrecondition naming the cause (no driver, a driver older than the runtime,
// no device, cuBLASLt missing; training diverged); kInvalidArgument for an ordinal with no
// device; kInternal for a failing CUDA call, naming it (a failed graph capture says that
// device.cuda_graph: false runs steps eagerly).
// Threading: as train/backend.h; the backend serializes its device work on one stream.
#pragma once

#include <memory>

#include "engine/core/thread_pool.h"
#include "engine/train/backend.h"

namespace dlrm::cuda {

// `config` is the engine's (validated): the model and both optimizers' kinds. `pool` (the
// engine's, borrowed; may be null) copies batches into pinned memory.
std::unique_ptr<train::Backend> MakeCudaBackend(int ordinal, train::ModelState* state,
                                                const config::DlrmConfig& config, ThreadPool* pool);

}  // namespace dlrm::cuda

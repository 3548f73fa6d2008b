// The seam between the Engine's bookkeeping and the device that computes.
//
// Everything that does not depend on the device is the Engine's, written once: config
// validation, batch validation, locks, the step counter and learning rates (RatesForStep),
// parameters by name, checkpoints. A Backend runs the arithmetic of one step and of
// prediction on its device: forward, backward, the divergence check and both updates.
//
// The host copy. ModelState (the model's parameters and both optimizers' state in host
// memory) is what checkpoints save and load and what parameters are read from and written
// to. The CPU backend computes on it directly. A device backend keeps its own copy and
// must make the host copy current before it is read (PullState) and take it over after
// the Engine changed it (PushState); between the two it may let the host copy go stale.
//
// Ownership: a Backend borrows the ModelState and pool it was made with; both outlive it.
// Threading: TrainStep and PushState are called under the Engine's writer lock (one at a
// time); PredictLogits, PullState and Phases under its reader lock, so they may run concurrently
// with each other and a device backend synchronizes PullState itself.
// Errors: TrainStep throws kFailedPrecondition, having updated nothing, when the loss or a
// gradient is not finite (CheckFinite); device errors are kInternal naming the call.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/config/dlrm.pb.h"
#include "engine/core/stopwatch.h"
#include "engine/core/thread_pool.h"
#include "engine/data/batch.h"
#include "engine/embedding/sparse_optimizer.h"
#include "engine/model/dlrm_model.h"
#include "engine/model/dynamic_tables.h"
#include "engine/optim/dense_optimizer.h"
#include "engine/train/step.h"

namespace dlrm::train {

// The model and its optimizers' state, in host memory.
// A backend only ever sees row numbers: the Engine translates the raw ids of DYNAMIC
// tables (dynamic_tables) before a batch reaches it.
struct ModelState {
  ModelState(const config::DlrmConfig& config, ThreadPool* pool);

  DlrmModel<float> model;
  std::unique_ptr<DenseOptimizer<float>> dense_optimizer;
  std::unique_ptr<SparseOptimizer<float>> sparse_optimizer;
  DynamicTables dynamic_tables;
};

// The batches around a step, for a device backend that copies the next batch in while
// this one computes (double buffering). Tokens name batches uniquely within one Engine
// (the asynchronous queue's tickets); 0 names none. `next`, when not null, is a batch that
// passed validation and that the Engine expects to train next, under `next_token`; it is
// a hint: the next call may bring another batch, and a backend then copies that one.
struct StepLookahead {
  int64_t token = 0;
  const ValidatedBatch* next = nullptr;
  int64_t next_token = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;

  // "cpu", "cuda:0": for messages.
  virtual std::string name() const = 0;

  // One optimizer step on a validated batch with the rates of step rates.t (the Engine's
  // step counter is rates.t - 1). Returns the batch's mean loss before the update.
  virtual double TrainStep(const ValidatedBatch& batch, const StepRates& rates,
                           const StepLookahead& lookahead) = 0;

  // logits[0 .. batch_size).
  virtual void PredictLogits(const ValidatedBatch& batch, float* logits) const = 0;

  // The host time of this backend's training steps so far, by phase (a device backend:
  // copying the batch in, enqueuing, waiting for the device), for `dlrm bench`.
  virtual StepPhases Phases() const = 0;

  // Makes the host copy current (device -> host). No-op for the CPU.
  virtual void PullState() const = 0;
  // Takes the host copy over after the Engine changed it (host -> device). No-op for the CPU.
  virtual void PushState() = 0;

  // The id resolution of DYNAMIC and SSD tables (model/dynamic_tables.h) changed these
  // rows of the host copy (each admission's fresh weights and optimizer state, an SSD
  // table's slots filled from its store) before the step or prediction that uses them: a
  // device copies them in, keeping what its rows held until the next call of either;
  // RestoreChangedRows, after that step failed, puts that back (the Engine takes the host
  // copy back itself). No-op for the CPU. Called between steps, under the writer lock or,
  // for a prediction, the reader lock and the SSD tables' lock.
  virtual void RowsChanged(const std::vector<ChangedRows>& changed) = 0;
  virtual void RestoreChangedRows() = 0;
  // Makes these rows of the host copy current (device -> host): an SSD table's evicted
  // slots before their write-back to the store. No-op for the CPU. May be called for
  // different tables at once (the resolution's threads).
  virtual void PullRows(const ChangedRows& rows) const = 0;
};

// Computes on the host copy itself, with `pool`.
std::unique_ptr<Backend> MakeCpuBackend(ModelState* state, ThreadPool* pool);

// Makes the Engine's backend for config.device() over the Engine's host copy (the one
// place that maps devices onto code: engine/device_backends.h; tests give backends that
// keep a copy of their own, as a device does).
using BackendFactory = std::function<std::unique_ptr<Backend>(const config::DlrmConfig& config,
                                                              ModelState* state, ThreadPool* pool)>;

}  // namespace dlrm::train

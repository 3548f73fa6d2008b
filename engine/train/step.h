// What one optimizer step is, written once for the single-process Engine and the
// data-parallel trainer (train/data_parallel_trainer.h), so the two steps cannot drift:
// the step's learning rates, the divergence check, and the dense update (element-wise, so
// split over the pool: the split never changes a value). The two differ only where they
// must: the trainer exchanges gradients between backward and update, and sends its sparse
// updates to the embedding owners.
//
// Thread safety: stateless functions over the caller's state; the caller serializes steps.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/config/dlrm.pb.h"
#include "engine/core/thread_pool.h"
#include "engine/optim/dense_optimizer.h"

namespace dlrm::train {

// The learning rates of the step after `step` (number step + 1): the base rates times the
// schedule's factor at `step`.
struct StepRates {
  int64_t t;  // the step's number, 1-based (Adam's bias correction)
  float dense_lr;
  float sparse_lr;
};
StepRates RatesForStep(const config::LrScheduleConfig& schedule, float base_dense_lr,
                       float base_sparse_lr, int64_t step);

// kFailedPrecondition (training diverged at `step`), naming the loss, unless the loss and
// every dense gradient value are finite and pooled_grads_finite (AllFinite of the pooled
// embeddings' gradients). Nothing has been updated when it throws.
void CheckFinite(int64_t step, double loss, const std::vector<float>& dense_grad,
                 bool pooled_grads_finite);

// params -= the optimizer's step on grad, over ranges of the vector in parallel.
void UpdateDense(DenseOptimizer<float>& optimizer, std::vector<float>& params, const float* grad,
                 const StepRates& rates, ThreadPool* pool);
// Whether UpdateDense with these arguments would leave every parameter and state finite
// (DenseOptimizer::UpdateIsFinite over the same ranges); nothing is written.
bool DenseUpdateIsFinite(const DenseOptimizer<float>& optimizer, const std::vector<float>& params,
                         const float* grad, const StepRates& rates, ThreadPool* pool);

// kFailedPrecondition for a step whose gradients are finite but whose update would make a
// parameter or an optimizer state non-finite (a learning rate too large for them), naming
// the step and both rates. Nothing has been updated when it throws.
[[noreturn]] void ThrowUpdateNotFinite(const StepRates& rates);

}  // namespace dlrm::train

#include "engine/train/step.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "engine/core/finite.h"
#include "engine/core/status.h"
#include "engine/optim/lr_schedule.h"

namespace dlrm::train {
namespace {

// Ranges of at least 16k parameters, at most 4 per thread: below that the split costs
// more than the sweep.
constexpr int64_t kMinParamsPerRange = 16384;
constexpr int64_t kRangesPerThread = 4;

// The ranges UpdateDense and DenseUpdateIsFinite split n parameters into.
int64_t DenseParts(int64_t n, ThreadPool* pool) {
  const int64_t threads = pool != nullptr ? pool->num_threads() : 1;
  return std::max<int64_t>(1,
                           std::min<int64_t>(threads * kRangesPerThread, n / kMinParamsPerRange));
}

}  // namespace

StepRates RatesForStep(const config::LrScheduleConfig& schedule, float base_dense_lr,
                       float base_sparse_lr, int64_t step) {
  const double factor = LrFactor(schedule, step);
  return {step + 1, static_cast<float>(base_dense_lr * factor),
          static_cast<float>(base_sparse_lr * factor)};
}

void CheckFinite(int64_t step, double loss, const std::vector<float>& dense_grad,
                 bool pooled_grads_finite) {
  if (!std::isfinite(loss) || !AllFinite(dense_grad) || !pooled_grads_finite)
    ThrowDiverged(step, loss);
}

void UpdateDense(DenseOptimizer<float>& optimizer, std::vector<float>& params, const float* grad,
                 const StepRates& rates, ThreadPool* pool) {
  const auto n = static_cast<int64_t>(params.size());
  ParallelForRanges(pool, n, DenseParts(n, pool), [&](int64_t begin, int64_t end) {
    optimizer.Update(params.data(), grad, begin, end, rates.dense_lr, rates.t);
  });
}

bool DenseUpdateIsFinite(const DenseOptimizer<float>& optimizer, const std::vector<float>& params,
                         const float* grad, const StepRates& rates, ThreadPool* pool) {
  const auto n = static_cast<int64_t>(params.size());
  const int64_t parts = DenseParts(n, pool);
  std::vector<char> finite(static_cast<size_t>(parts), 1);
  ParallelFor(pool, parts, [&](int64_t p) {
    finite[static_cast<size_t>(p)] =
        optimizer.UpdateIsFinite(params.data(), grad, SplitBegin(n, parts, p),
                                 SplitBegin(n, parts, p + 1), rates.dense_lr, rates.t);
  });
  return std::all_of(finite.begin(), finite.end(), [](char f) { return f != 0; });
}

void ThrowUpdateNotFinite(const StepRates& rates) {
  Throw(StatusCode::kFailedPrecondition, "training diverged at step ", rates.t - 1,
        ": the update would make a parameter or an optimizer state non-finite (dense learning "
        "rate ",
        rates.dense_lr, ", sparse learning rate ", rates.sparse_lr,
        "); parameters were not updated. Lower the learning rate.");
}

}  // namespace dlrm::train

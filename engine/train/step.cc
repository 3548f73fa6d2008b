#include "engine/train/step.h"

#include <algorithm>
#include <cmath>

#include "engine/core/finite.h"
#include "engine/optim/lr_schedule.h"

namespace dlrm::train {
namespace {

// Ranges of at least 16k parameters, at most 4 per thread: below that the split costs
// more than the sweep.
constexpr int64_t kMinParamsPerRange = 16384;
constexpr int64_t kRangesPerThread = 4;

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
  const int64_t threads = pool != nullptr ? pool->num_threads() : 1;
  const int64_t parts =
      std::max<int64_t>(1, std::min<int64_t>(threads * kRangesPerThread, n / kMinParamsPerRange));
  ParallelForRanges(pool, n, parts, [&](int64_t begin, int64_t end) {
    optimizer.Update(params.data(), grad, begin, end, rates.dense_lr, rates.t);
  });
}

}  // namespace dlrm::train

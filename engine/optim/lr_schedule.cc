#include "engine/optim/lr_schedule.h"

#include <algorithm>
#include <cmath>

#include "engine/core/status.h"

namespace dlrm {

double LrFactor(const config::LrScheduleConfig& schedule, int64_t step) {
  if (step < 0) ThrowInvalid("LrFactor: step must be >= 0, got ", step);
  const int64_t warmup = schedule.warmup_steps();
  if (step < warmup) {
    return static_cast<double>(step + 1) / static_cast<double>(warmup);
  }
  const int64_t decay_steps = schedule.decay_steps();
  if (decay_steps > 0 && step >= schedule.decay_start_step()) {
    const int64_t elapsed = std::min(step - schedule.decay_start_step(), decay_steps);
    const double t = static_cast<double>(elapsed) / static_cast<double>(decay_steps);
    const double end = schedule.end_factor();
    return end + (1.0 - end) * std::pow(1.0 - t, static_cast<double>(schedule.decay_power()));
  }
  return 1.0;
}

}  // namespace dlrm

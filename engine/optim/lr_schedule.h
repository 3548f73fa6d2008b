// Learning-rate multiplier for a 0-based step; see LrScheduleConfig in dlrm.proto.
#pragma once

#include <cstdint>

#include "engine/config/dlrm.pb.h"

namespace dlrm {

double LrFactor(const config::LrScheduleConfig& schedule, int64_t step);

}  // namespace dlrm

// Wall-clock timing for the command line's progress and throughput lines.
#pragma once

#include <chrono>

namespace dlrm::tools {

using Clock = std::chrono::steady_clock;

inline double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace dlrm::tools

// Wall-clock timing: the command line's progress and throughput lines, and the host time
// of a training step's phases that `dlrm bench` reports (StepPhases).
//
// Threading: PhaseTimes is for one thread at a time (its owner's lock); ScopedTimers may
// share a total across threads. Errors: none.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace dlrm {

using Clock = std::chrono::steady_clock;

inline double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }
inline double SecondsSince(Clock::time_point start) { return Seconds(Clock::now() - start); }

// The host seconds spent in each phase of the training steps so far, in the order a step
// runs them, and how many steps; the difference of two readings is a window's.
struct StepPhases {
  struct Phase {
    std::string name;
    double seconds = 0;
  };
  std::vector<Phase> phases;
  int64_t steps = 0;
};

// Adds its lifetime's wall time, in nanoseconds, to *total_ns (owners on several threads may
// share one).
class ScopedTimer {
 public:
  explicit ScopedTimer(std::atomic<int64_t>* total_ns) : total_(total_ns), start_(Clock::now()) {}
  ~ScopedTimer() {
    total_->fetch_add(
        std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start_).count(),
        std::memory_order_relaxed);
  }
  ScopedTimer(const ScopedTimer&) = delete;
  ScopedTimer& operator=(const ScopedTimer&) = delete;

 private:
  std::atomic<int64_t>* const total_;
  const Clock::time_point start_;
};

// N named phases, timed lap by lap: Start() at a step's beginning, Lap(i) at the end of
// phase i (adding the time since the last Start or Lap), Step() once the step is done.
template <size_t N>
class PhaseTimes {
 public:
  explicit PhaseTimes(std::array<const char*, N> names) : names_(names) {}

  void Start() { last_ = Clock::now(); }
  void Lap(size_t phase) {
    const Clock::time_point now = Clock::now();
    total_[phase] += now - last_;
    last_ = now;
  }
  void Step() { ++steps_; }

  StepPhases Read() const {
    StepPhases out;
    for (size_t i = 0; i < N; ++i) out.phases.push_back({names_[i], Seconds(total_[i])});
    out.steps = steps_;
    return out;
  }

 private:
  const std::array<const char*, N> names_;
  std::array<Clock::duration, N> total_{};
  Clock::time_point last_;
  int64_t steps_ = 0;
};

}  // namespace dlrm

// What the CUDA benchmarks share: a median of launches timed with device events, device
// arrays filled with random values, and their main. Benchmark code: errors are
// CheckCuda's Error, which RunBench prints.
#pragma once

#include <cuda_runtime.h>
#include <gflags/gflags.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "engine/core/philox.h"
#include "engine/core/status.h"
#include "engine/cuda/device.h"
#include "engine/cuda/device_buffer.h"

namespace dlrm::cuda {

// The median of `reps` timings (ms) of fn(i), each between two events on `stream`, after
// three untimed calls.
template <typename Fn>
double MedianMs(int reps, cudaStream_t stream, Fn fn) {
  const Event begin("cudaEventCreate (timing)", cudaEventDefault),
      end("cudaEventCreate (timing)", cudaEventDefault);
  for (int i = 0; i < 3; ++i) fn(i);  // warm-up
  std::vector<float> ms(static_cast<size_t>(std::max(reps, 1)));
  for (size_t i = 0; i < ms.size(); ++i) {
    CheckCuda(cudaEventRecord(begin, stream), "cudaEventRecord");
    fn(static_cast<int>(i));
    CheckCuda(cudaEventRecord(end, stream), "cudaEventRecord");
    CheckCuda(cudaEventSynchronize(end), "cudaEventSynchronize");
    CheckCuda(cudaEventElapsedTime(&ms[i], begin, end), "cudaEventElapsedTime");
  }
  std::nth_element(ms.begin(), ms.begin() + ms.size() / 2, ms.end());
  return ms[ms.size() / 2];
}

// `block` (not empty) copied over device `array` [count] again and again.
inline void FillRepeating(float* array, size_t count, const std::vector<float>& block) {
  for (size_t at = 0; at < count; at += block.size()) {
    const size_t n = std::min(block.size(), count - at);
    CheckCuda(cudaMemcpy(array + at, block.data(), n * sizeof(float), cudaMemcpyHostToDevice),
              "cudaMemcpy (fill)");
  }
}

// `count` values uniform in (-1, 1) into `array`: a random block (seeded by `salt`) copied
// over it.
inline void FillRandom(float* array, size_t count, uint64_t salt = 7) {
  const CounterRng rng(salt, 0, 0);
  std::vector<float> block(std::max<size_t>(std::min<size_t>(count, size_t{1} << 24), 1));
  for (size_t i = 0; i < block.size(); ++i) block[i] = static_cast<float>(2 * rng.Uniform(i) - 1);
  FillRepeating(array, count, block);
}

// A benchmark's main: parses the flags, returns run()'s exit status, or prints
// "<name>: <error>" and returns 1 when it throws.
template <typename Run>
int RunBench(const char* name, int argc, char** argv, Run run) {
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  try {
    return run();
  } catch (const Error& e) {
    std::fprintf(stderr, "%s: %s\n", name, e.what());
    return 1;
  }
}

}  // namespace dlrm::cuda

// Helpers of the CUDA backend's suites (tests/engine/cuda/, ctest label `gpu`): the skip
// that names why there is no device, device copies of host vectors, random inputs and the
// comparison within rounding.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "engine/core/philox.h"
#include "engine/cuda/device.h"
#include "engine/cuda/device_buffer.h"
#include "engine/cuda/pooled_embedding.h"

// Reports the test SKIPPED, with the runtime's reason, where there is no usable device.
#define SKIP_WITHOUT_GPU()              \
  if (::dlrm::cuda::DeviceCount() == 0) \
  GTEST_SKIP() << "no CUDA device: " << ::dlrm::cuda::NoDeviceReason()

namespace dlrm::testing {

// A batch's ids as the device holds them (cuda::DeviceId, 32 bits; each id below 2^32).
inline std::vector<cuda::DeviceId> DeviceIds(const std::vector<int64_t>& ids) {
  return std::vector<cuda::DeviceId>(ids.begin(), ids.end());
}

// A device copy of a host vector, freed with the object; copies are synchronous. Holds at
// least one element, so get() is never null (kernels tell "absent" by a null pointer).
template <typename T>
class DeviceCopy {
 public:
  explicit DeviceCopy(const std::vector<T>& host)
      : buffer_(std::max<size_t>(1, host.size())), size_(host.size()) {
    buffer_.CopyIn(host.data(), size_, nullptr);
    cuda::CheckCuda(cudaStreamSynchronize(nullptr), "cudaStreamSynchronize");
  }
  T* get() const { return buffer_.get(); }
  std::vector<T> ToHost() const {
    std::vector<T> host(size_);
    buffer_.Download(host.data(), size_, nullptr);
    cuda::CheckCuda(cudaStreamSynchronize(nullptr), "cudaStreamSynchronize");
    return host;
  }

 private:
  cuda::DeviceBuffer<T> buffer_;
  size_t size_;
};

// n values uniform in (-scale, scale), a pure function of seed.
inline std::vector<float> RandomFloats(size_t n, uint64_t seed, double scale = 1.0) {
  std::vector<float> v(n);
  const CounterRng rng(seed, 0, 0);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<float>((rng.Uniform(i) * 2.0 - 1.0) * scale);
  return v;
}

// Each got[i] within tol * (1 + |want[i]|) of want[i] (fp32 rounding of another order).
inline void ExpectAllNear(const std::vector<float>& got, const std::vector<float>& want, float tol,
                          const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], tol * (1.0f + std::fabs(want[i]))) << what << "[" << i << "]";
}

}  // namespace dlrm::testing

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

// Reports the test SKIPPED, with the runtime's reason, where there is no usable device.
#define SKIP_WITHOUT_GPU()              \
  if (::dlrm::cuda::DeviceCount() == 0) \
  GTEST_SKIP() << "no CUDA device: " << ::dlrm::cuda::NoDeviceReason()

namespace dlrm::testing {

// A device copy of a host vector, freed with the object.
template <typename T>
class DeviceCopy {
 public:
  explicit DeviceCopy(const std::vector<T>& host) : size_(host.size()) {
    cuda::CheckCuda(
        cudaMalloc(reinterpret_cast<void**>(&ptr_), std::max<size_t>(1, size_) * sizeof(T)),
        "cudaMalloc");
    if (size_ > 0)
      cuda::CheckCuda(cudaMemcpy(ptr_, host.data(), size_ * sizeof(T), cudaMemcpyHostToDevice),
                      "cudaMemcpy");
  }
  ~DeviceCopy() { cudaFree(ptr_); }
  DeviceCopy(const DeviceCopy&) = delete;
  DeviceCopy& operator=(const DeviceCopy&) = delete;
  T* get() const { return ptr_; }
  std::vector<T> ToHost() const {
    std::vector<T> host(size_);
    cuda::CheckCuda(cudaMemcpy(host.data(), ptr_, size_ * sizeof(T), cudaMemcpyDeviceToHost),
                    "cudaMemcpy");
    return host;
  }

 private:
  T* ptr_ = nullptr;
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

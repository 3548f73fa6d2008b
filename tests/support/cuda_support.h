// Helpers of the CUDA backend's suites (tests/engine/cuda/, ctest label `gpu`): the skip
// that names why there is no device, and device copies of host vectors.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <vector>

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

}  // namespace dlrm::testing

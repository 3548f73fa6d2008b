#include <cuda_runtime.h>

#include "engine/core/status.h"
#include "engine/cuda/device.h"

namespace dlrm::cuda {
namespace {

// The count and, when it is 0, the runtime's reason; asked once per call (cheap: the
// runtime caches its own initialization).
int Count(std::string* reason) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    if (reason != nullptr) *reason = cudaGetErrorString(e);
    (void)cudaGetLastError();  // reset the last error, so later calls start clean
    return 0;
  }
  if (n == 0 && reason != nullptr) *reason = "no CUDA-capable device is detected";
  return n;
}

}  // namespace

int DeviceCount() { return Count(nullptr); }

std::string NoDeviceReason() {
  std::string reason;
  Count(&reason);
  return reason;
}

DeviceInfo OpenDevice(int ordinal) {
  std::string reason;
  const int n = Count(&reason);
  if (n == 0) Throw(StatusCode::kFailedPrecondition, "no usable CUDA device: ", reason);
  if (ordinal < 0 || ordinal >= n)
    ThrowInvalid("device.ordinal ", ordinal, " is outside [0, ", n, ") (", n,
                 " CUDA devices here)");
  CheckCuda(cudaSetDevice(ordinal), "cudaSetDevice");
  cudaDeviceProp prop{};
  CheckCuda(cudaGetDeviceProperties(&prop, ordinal), "cudaGetDeviceProperties");
  DeviceInfo info;
  info.ordinal = ordinal;
  info.name = prop.name;
  info.compute_major = prop.major;
  info.compute_minor = prop.minor;
  info.multiprocessors = prop.multiProcessorCount;
  info.memory_bytes = prop.totalGlobalMem;
  info.shared_memory_per_block = prop.sharedMemPerBlockOptin;
  return info;
}

size_t FreeMemoryBytes() {
  size_t free = 0, total = 0;
  CheckCuda(cudaMemGetInfo(&free, &total), "cudaMemGetInfo");
  return free;
}

void CheckCuda(int status, const char* what) {
  if (status == cudaSuccess) return;
  // The runtime also records a failed call (cudaMalloc's out of memory) as the thread's
  // last error, which the next launch's cudaGetLastError would report as its own: the
  // error is thrown here once, so its record goes (a sticky error stays in the context).
  (void)cudaGetLastError();
  Throw(StatusCode::kInternal, what,
        " failed: ", cudaGetErrorString(static_cast<cudaError_t>(status)));
}

}  // namespace dlrm::cuda

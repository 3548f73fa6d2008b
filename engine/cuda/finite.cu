#include "engine/cuda/device.h"
#include "engine/cuda/finite.h"

namespace dlrm::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxBlocks = 1024;

template <typename T>
__global__ void CountNonFinite(const T* v, int64_t n, int32_t* non_finite) {
  int bad = 0;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    bad |= !isfinite(v[i]);
  if (__syncthreads_or(bad) && threadIdx.x == 0) atomicAdd(non_finite, 1);
}

template <typename T>
void Launch(const T* values, int64_t n, int32_t* non_finite, cudaStream_t stream) {
  if (n <= 0) return;
  const int64_t wanted = (n + kThreads - 1) / kThreads;
  const auto blocks = static_cast<unsigned>(wanted < kMaxBlocks ? wanted : kMaxBlocks);
  CountNonFinite<<<blocks, kThreads, 0, stream>>>(values, n, non_finite);
  CheckCuda(cudaGetLastError(), "finite check");
}

}  // namespace

void LaunchCountNonFinite(const float* values, int64_t n, int32_t* non_finite,
                          cudaStream_t stream) {
  Launch(values, n, non_finite, stream);
}

void LaunchCountNonFinite(const double* values, int64_t n, int32_t* non_finite,
                          cudaStream_t stream) {
  Launch(values, n, non_finite, stream);
}

}  // namespace dlrm::cuda

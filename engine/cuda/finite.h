// Whether device arrays hold only finite values: the divergence check of a device step
// (train/step.h CheckFinite) without copying the gradients to the host.
//
// Memory: device pointers borrowed for the launch; *non_finite is a device counter the
// caller zeroes, incremented (an integer atomic: the count, not its order, is read) once
// per block that saw a NaN or infinity. Thread safety: ordered by `stream`.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace dlrm::cuda {

void LaunchCountNonFinite(const float* values, int64_t n, int32_t* non_finite, cudaStream_t stream);
void LaunchCountNonFinite(const double* values, int64_t n, int32_t* non_finite,
                          cudaStream_t stream);

}  // namespace dlrm::cuda

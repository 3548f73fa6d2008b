// Copies between pageable host arrays and device memory through pinned buffers. A DMA
// reads and writes only page-locked memory; from pageable memory the driver stages the
// bytes through buffers of its own at a few GB/s on one core. Here the pool's threads copy
// into (or out of) a pinned buffer of the caller's, reused from call to call, and the DMA
// moves it at the bus's rate.
//
// Memory: borrows every array; `pinned` is grown as needed and is read (to the device) or
// written (to the host) by the device until the stream passes the copy: the caller must
// synchronize the stream before it reuses the buffer or reads what came back.
// Threading: as the pool's ParallelFor and the stream's order. Errors: kInternal naming
// the CUDA call.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>

#include "engine/core/parallel_copy.h"
#include "engine/core/thread_pool.h"
#include "engine/cuda/device.h"
#include "engine/cuda/device_buffer.h"

namespace dlrm::cuda {

// Values copied into pinned memory before their chunk's DMA starts: the device copies one
// chunk while the host fills the next.
inline constexpr size_t kStageChunkBytes = size_t{4} << 20;

// device[0 .. count) = from[0 .. count), enqueued on `stream` through `pinned`; values of
// another type than the device's are converted as they are pinned (CopyInParallel).
template <typename From, typename T>
void CopyToDevice(ThreadPool* pool, const From* from, size_t count, PinnedBuffer<T>& pinned,
                  T* device, cudaStream_t stream) {
  if (count == 0 || from == nullptr) return;
  pinned.Reserve(count);
  const size_t chunk = std::max<size_t>(1, kStageChunkBytes / sizeof(T));
  for (size_t at = 0; at < count; at += chunk) {
    const size_t n = std::min(chunk, count - at);
    CopyInParallel(pool, from + at, n, pinned.get() + at);
    CheckCuda(cudaMemcpyAsync(device + at, pinned.get() + at, n * sizeof(T), cudaMemcpyHostToDevice,
                              stream),
              "cudaMemcpyAsync (to the device, pinned)");
  }
}

// pinned[0 .. count) = device[0 .. count), enqueued on `stream`; once the caller has
// synchronized it, CopyFromPinned moves the values to their host array.
template <typename T>
void StartCopyToHost(const T* device, size_t count, PinnedBuffer<T>& pinned, cudaStream_t stream) {
  if (count == 0) return;
  pinned.Reserve(count);
  CheckCuda(
      cudaMemcpyAsync(pinned.get(), device, count * sizeof(T), cudaMemcpyDeviceToHost, stream),
      "cudaMemcpyAsync (to the host, pinned)");
}

template <typename T>
void CopyFromPinned(ThreadPool* pool, const PinnedBuffer<T>& pinned, size_t count, T* to) {
  CopyInParallel(pool, pinned.get(), count, to);
}

}  // namespace dlrm::cuda

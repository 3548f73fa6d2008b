// The CUDA devices this process can use, asked without ever crashing: on a machine with no
// GPU, no driver or a driver older than the CUDA runtime libdlrm was built with, asking for
// a device is an error naming that cause. The runtime is linked statically, so libdlrm.so
// loads and trains on CPU where there is no driver at all.
//
// Thread safety: every function may be called from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace dlrm::cuda {

struct DeviceInfo {
  int ordinal = -1;
  std::string name;  // "NVIDIA H100 80GB HBM3"
  int compute_major = 0, compute_minor = 0;
  int multiprocessors = 0;
  size_t memory_bytes = 0;
  size_t shared_memory_per_block = 0;  // the opt-in limit (227 KiB on an H100)
};

// How many devices there are; 0 where there is no driver or no device (NoDeviceReason
// says which).
int DeviceCount();
// Why DeviceCount() is 0: the CUDA runtime's own words ("CUDA driver version is
// insufficient for CUDA runtime version", "no CUDA-capable device is detected"); "" when
// there are devices.
std::string NoDeviceReason();

// Selects `ordinal` for the calling thread and describes it. kFailedPrecondition naming
// the cause when there is no usable device; kInvalidArgument for an ordinal outside
// [0, DeviceCount()).
DeviceInfo OpenDevice(int ordinal);

// The free memory of the device selected for the calling thread, in bytes
// (cudaMemGetInfo). kInternal naming the call.
size_t FreeMemoryBytes();

// kInternal naming `what` and the runtime's message unless `status` is cudaSuccess (an int,
// so this header needs no CUDA include).
void CheckCuda(int status, const char* what);

// The blocks of `threads` threads a launch of one thread per item needs for `count` items.
inline unsigned GridBlocks(int64_t count, int threads) {
  return static_cast<unsigned>((count + threads - 1) / threads);
}

}  // namespace dlrm::cuda

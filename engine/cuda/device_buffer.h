// Arrays owned by the object and freed with it: DeviceBuffer in device memory,
// PinnedBuffer in page-locked host memory (what an asynchronous copy can read from while
// the host goes on, and what a CUDA graph's copies may name). Sizes are in elements; a
// zero-size buffer holds no allocation and get() is null. Stream: a stream owned the same
// way, so a constructor that throws after making one leaks nothing.
//
// Thread safety: an object is used by one thread at a time; copies are ordered by the
// stream given. Errors: kInternal (CheckCuda) naming the call; a failed allocation names
// the bytes asked for.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "engine/core/status.h"
#include "engine/cuda/device.h"

namespace dlrm::cuda {

// A non-blocking stream of the device selected when it is made; its work is finished and
// it is destroyed with the object (on the device then selected: the owner's destructor
// selects its own first). Converts to the cudaStream_t it holds.
class Stream {
 public:
  explicit Stream(const char* what = "cudaStreamCreate") {
    CheckCuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), what);
  }
  ~Stream() {
    cudaStreamSynchronize(stream_);
    cudaStreamDestroy(stream_);
  }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  operator cudaStream_t() const { return stream_; }  // NOLINT: a handle's natural use

 private:
  cudaStream_t stream_ = nullptr;
};

// An event, destroyed with the object: by default without timing (a point of a stream
// another stream waits for); with flags cudaEventDefault, one cudaEventElapsedTime can
// read (the benchmarks'). Converts to the cudaEvent_t it holds.
class Event {
 public:
  explicit Event(const char* what = "cudaEventCreate", unsigned flags = cudaEventDisableTiming) {
    CheckCuda(cudaEventCreateWithFlags(&event_, flags), what);
  }
  ~Event() { cudaEventDestroy(event_); }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  operator cudaEvent_t() const { return event_; }  // NOLINT: a handle's natural use

 private:
  cudaEvent_t event_ = nullptr;
};

template <typename T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t count) { Resize(count); }
  ~DeviceBuffer() { Free(); }
  DeviceBuffer(DeviceBuffer&& other) noexcept
      : ptr_(std::exchange(other.ptr_, nullptr)), count_(std::exchange(other.count_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    std::swap(ptr_, other.ptr_);
    std::swap(count_, other.count_);
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  // Reallocates (contents lost) unless `count` elements are already held.
  void Resize(size_t count) {
    if (count == count_) return;
    Free();
    if (count == 0) return;
    CheckCuda(cudaMalloc(reinterpret_cast<void**>(&ptr_), count * sizeof(T)),
              ("cudaMalloc of " + std::to_string(count * sizeof(T)) + " bytes").c_str());
    count_ = count;
  }
  // Grows to at least `count` elements (contents lost when it grows); never shrinks, so a
  // buffer shared by calls of several sizes is allocated once, for the largest.
  void Reserve(size_t count) {
    if (count > count_) Resize(count);
  }
  // Resizes to host.size() and copies it in, ordered on `stream`.
  void Upload(const T* host, size_t count, cudaStream_t stream) {
    Resize(count);
    CopyIn(host, count, stream);
  }
  // Copies `count` <= size() elements into the front of the buffer, ordered on `stream`.
  void CopyIn(const T* host, size_t count, cudaStream_t stream) {
    DLRM_INTERNAL_CHECK(count <= count_);
    if (count > 0)
      CheckCuda(cudaMemcpyAsync(ptr_, host, count * sizeof(T), cudaMemcpyHostToDevice, stream),
                "cudaMemcpyAsync (to the device)");
  }
  void Upload(const std::vector<T>& host, cudaStream_t stream) {
    Upload(host.data(), host.size(), stream);
  }
  // Copies the first `count` elements out, ordered on `stream` (the caller synchronizes).
  void Download(T* host, size_t count, cudaStream_t stream) const {
    DLRM_INTERNAL_CHECK(count <= count_);
    if (count > 0)
      CheckCuda(cudaMemcpyAsync(host, ptr_, count * sizeof(T), cudaMemcpyDeviceToHost, stream),
                "cudaMemcpyAsync (to the host)");
  }

  T* get() const { return ptr_; }
  size_t size() const { return count_; }

 private:
  void Free() {
    if (ptr_ != nullptr) cudaFree(ptr_);
    ptr_ = nullptr;
    count_ = 0;
  }

  T* ptr_ = nullptr;
  size_t count_ = 0;
};

template <typename T>
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  ~PinnedBuffer() { Free(); }
  PinnedBuffer(PinnedBuffer&& other) noexcept
      : ptr_(std::exchange(other.ptr_, nullptr)), count_(std::exchange(other.count_, 0)) {}
  PinnedBuffer& operator=(PinnedBuffer&& other) noexcept {
    std::swap(ptr_, other.ptr_);
    std::swap(count_, other.count_);
    return *this;
  }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;

  // Grows to at least `count` elements (contents lost when it grows).
  void Reserve(size_t count) {
    if (count <= count_) return;
    Free();
    CheckCuda(cudaMallocHost(reinterpret_cast<void**>(&ptr_), count * sizeof(T)),
              ("cudaMallocHost of " + std::to_string(count * sizeof(T)) + " bytes").c_str());
    count_ = count;
  }

  T* get() const { return ptr_; }
  size_t size() const { return count_; }

 private:
  void Free() {
    if (ptr_ != nullptr) cudaFreeHost(ptr_);
    ptr_ = nullptr;
    count_ = 0;
  }

  T* ptr_ = nullptr;
  size_t count_ = 0;
};

}  // namespace dlrm::cuda

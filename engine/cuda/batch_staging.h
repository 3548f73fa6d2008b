// The batch of a training step on the device, copied in one of two ways: straight from the
// caller's memory on the compute stream (a batch nobody announced), or, for the batch the
// Engine announced as the next one (train::StepLookahead), through pinned host buffers on
// a copy stream of its own while the current step computes (double buffering).
//
// Two slots alternate. A slot's device arrays only grow, and its generation counts the
// times one of them moved, so a CUDA graph that names them can tell when it is stale.
//
// Memory: owns its pinned and device buffers, its copy stream and its events. A batch's
// memory is read during Acquire and Prefetch only.
// Threading: one thread at a time (the backend's lock); every step enqueued on the compute
// stream after an Acquire must have finished (the backend synchronizes each step) before
// the next Prefetch or Acquire.
// Errors: kInternal naming the CUDA call.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "engine/cuda/device_buffer.h"
#include "engine/data/batch.h"

namespace dlrm::cuda {

// What a captured step depends on besides the data: sizes and which arrays exist.
struct BatchShape {
  int64_t batch_size = 0, num_ids = 0;
  bool weights = false, labels = false;

  bool operator==(const BatchShape& o) const {
    return batch_size == o.batch_size && num_ids == o.num_ids && weights == o.weights &&
           labels == o.labels;
  }
  bool operator!=(const BatchShape& o) const { return !(*this == o); }
};
BatchShape ShapeOf(const BatchView& batch, bool with_labels);

// A batch's arrays on the device (offsets: ValidatedBatch::offsets).
struct DeviceBatch {
  DeviceBuffer<float> dense, labels, weights;
  DeviceBuffer<int64_t> offsets, ids;
  BatchShape shape;
  uint64_t generation = 0;  // bumped whenever an array moved

  // Sets the shape of `batch` (with labels if `with_labels`) and grows the arrays for it
  // and its `num_offsets` bag offsets.
  void Reserve(const BatchView& batch, size_t num_offsets, bool with_labels);
};

// Copies `batch` (labels too if `with_labels`) and its `num_offsets` bag offsets into
// `out`, ordered on `stream`.
void CopyBatch(const BatchView& batch, const int64_t* offsets, size_t num_offsets, bool with_labels,
               DeviceBatch* out, cudaStream_t stream);

class BatchStaging {
 public:
  explicit BatchStaging(cudaStream_t compute);
  ~BatchStaging();
  BatchStaging(const BatchStaging&) = delete;
  BatchStaging& operator=(const BatchStaging&) = delete;

  // `batch` on the device, ready for work enqueued on the compute stream after this call:
  // the slot Prefetch filled if `token` is the nonzero one it was given, else a slot
  // copied now (the last one used, so that its CUDA graph stays valid).
  const DeviceBatch& Acquire(const ValidatedBatch& batch, bool labels, int64_t token);
  // Copies `next` (a validated training batch) into pinned memory, then starts its copy
  // into the slot Acquire did not return, on the copy stream; returns without waiting for it.
  void Prefetch(const ValidatedBatch& next, int64_t token);
  // Forgets a prefetched batch (the next Acquire copies its batch itself).
  void CancelPrefetch() { staged_ = -1; }
  // The slot of the last Acquire (0 or 1).
  int slot() const { return current_; }

 private:
  struct Slot {
    DeviceBatch device;
    PinnedBuffer<float> dense, labels, weights;
    PinnedBuffer<int64_t> offsets, ids;
    cudaEvent_t copied = nullptr;  // the copy stream's last copy into `device`
  };
  // Fills slot s's pinned buffers from `next` (indexed), then starts the copy into its
  // device arrays.
  void StageInto(Slot& s, const ValidatedBatch& next);

  const cudaStream_t compute_;
  cudaStream_t copy_ = nullptr;
  Slot slots_[2];
  int current_ = 0;
  int staged_ = -1;  // the slot Prefetch filled, until an Acquire takes it
  int64_t staged_token_ = 0;
};

}  // namespace dlrm::cuda

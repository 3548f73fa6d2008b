// The batch of a training step or a prediction on the device. Every batch travels through
// pinned host buffers (filled by the engine's threads, each a slice: a memcpy from pageable
// memory is a few GB/s on one core, a DMA from pinned memory tens), 4 MiB at a time, the
// device copying one chunk while the host pins the next. The batch the Engine
// announced as the next one (train::StepLookahead) is copied on a copy stream of its own
// while the current step computes (double buffering); a batch nobody announced is copied
// when its step asks for it, and the step waits for that copy on the device.
//
// Ids travel as DeviceId (32 bits; pooled_embedding.h), narrowed as they are pinned: half the
// bytes of the host's int64 to pin, copy and read.
//
// Two training slots alternate; predictions have a third of their own. A slot's device arrays only
// grow, and its generation counts the times one of them moved, so a CUDA graph that names them can
// tell when it is stale.
//
// Memory: owns its pinned and device buffers, its copy stream and its events; borrows the
// thread pool (may be null: one thread). A batch's memory is read during Acquire, Prefetch
// and AcquireForPredict only.
// Threading: one thread at a time (the backend's lock); every step enqueued on the compute
// stream after an Acquire must have finished (the backend synchronizes each step) before
// the next Prefetch or Acquire.
// Errors: kInternal naming the CUDA call.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "engine/core/thread_pool.h"
#include "engine/cuda/device_buffer.h"
#include "engine/cuda/pooled_embedding.h"
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
  DeviceBuffer<int64_t> offsets;
  DeviceBuffer<DeviceId> ids;
  BatchShape shape;
  uint64_t generation = 0;  // bumped whenever an array moved, or may have (a failed Reserve)

  // Sets the shape of `batch` (with labels if `with_labels`) and grows the arrays for it
  // and its `num_offsets` bag offsets.
  void Reserve(const BatchView& batch, size_t num_offsets, bool with_labels);
  // The pooled forward of this batch's bags: `count` features (device specs, one per
  // sparse feature of the batch) into out [batch_size x out_width].
  PooledForwardArgs PooledArgs(const FeatureSpec* features, int32_t count, float* out,
                               int32_t out_width) const;
};

class BatchStaging {
 public:
  BatchStaging(cudaStream_t compute, ThreadPool* pool);
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
  // `batch` (no labels) on the device in the prediction slot, copied on the compute
  // stream: ready for work enqueued there after this call.
  const DeviceBatch& AcquireForPredict(const ValidatedBatch& batch);
  // Forgets a prefetched batch (the next Acquire copies its batch itself).
  void CancelPrefetch() { staged_ = -1; }
  // The slot of the last Acquire (0 or 1).
  int slot() const { return current_; }

 private:
  struct Slot {
    DeviceBatch device;
    PinnedBuffer<float> dense, labels, weights;
    PinnedBuffer<int64_t> offsets;
    PinnedBuffer<DeviceId> ids;
    Event copied{"cudaEventCreate (copy)"};  // the copy stream's last copy into `device`
  };
  // Fills slot s's pinned buffers from `next` (labels too if `labels`) once its previous
  // copy has finished, then starts the copy into its device arrays on `stream`.
  void StageInto(Slot& s, const ValidatedBatch& next, bool labels, cudaStream_t stream);
  // Copies `count` elements into `device` (sized) through `pinned` (grown as needed), 4 MiB
  // at a time: each chunk pinned (converted to T) by the pool's threads, then its copy
  // started on `stream`, so that the device copies one chunk while the host pins the next.
  // Nothing for none.
  template <typename From, typename T>
  void Stage(PinnedBuffer<T>& pinned, DeviceBuffer<T>& device, const From* from, size_t count,
             cudaStream_t stream);

  const cudaStream_t compute_;
  ThreadPool* const pool_;
  const Stream copy_{"cudaStreamCreate (copy)"};
  Slot slots_[2];
  Slot predict_;
  int current_ = 0;
  int staged_ = -1;  // the slot Prefetch filled, until an Acquire takes it
  int64_t staged_token_ = 0;
};

}  // namespace dlrm::cuda

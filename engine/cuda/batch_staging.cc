#include "engine/cuda/batch_staging.h"

#include <algorithm>

#include "engine/cuda/device.h"
#include "engine/cuda/host_copy.h"

namespace dlrm::cuda {
namespace {

// Grows `buffer` to `count`; true if it moved.
template <typename T>
bool Grow(DeviceBuffer<T>& buffer, size_t count) {
  const T* before = buffer.get();
  buffer.Reserve(count);
  return buffer.get() != before;
}

size_t DenseCount(const BatchView& v) {
  return static_cast<size_t>(v.batch_size) * static_cast<size_t>(v.num_dense);
}

}  // namespace

BatchShape ShapeOf(const BatchView& batch, bool with_labels) {
  BatchShape s;
  s.batch_size = batch.batch_size;
  s.num_ids = batch.num_ids;
  s.weights = batch.weights != nullptr;
  s.labels = with_labels;
  return s;
}

void DeviceBatch::Reserve(const BatchView& batch, size_t num_offsets, bool with_labels) {
  shape = ShapeOf(batch, with_labels);
  const auto n = static_cast<size_t>(batch.batch_size);
  const auto num_ids = static_cast<size_t>(batch.num_ids);
  bool moved = false;
  try {
    moved |= Grow(dense, DenseCount(batch));
    moved |= Grow(offsets, num_offsets);
    moved |= Grow(ids, num_ids);
    if (with_labels) moved |= Grow(labels, n);
    if (shape.weights) moved |= Grow(weights, num_ids);
  } catch (...) {
    ++generation;  // an array may have moved before the one that failed: no graph names it
    throw;
  }
  if (moved) ++generation;
}

PooledForwardArgs DeviceBatch::PooledArgs(const FeatureSpec* features, int32_t count, float* out,
                                          int32_t out_width) const {
  PooledForwardArgs args;
  args.features = features;
  args.num_features = count;
  args.batch_size = shape.batch_size;
  args.offsets = offsets.get();
  args.ids = ids.get();
  args.weights = shape.weights ? weights.get() : nullptr;
  args.out = out;
  args.out_width = out_width;
  return args;
}

template <typename From, typename T>
void BatchStaging::Stage(PinnedBuffer<T>& pinned, DeviceBuffer<T>& device, const From* from,
                         size_t count, cudaStream_t stream) {
  CopyToDevice(pool_, from, count, pinned, device.get(), stream);
}

BatchStaging::BatchStaging(cudaStream_t compute, ThreadPool* pool)
    : compute_(compute), pool_(pool) {}

BatchStaging::~BatchStaging() {
  cudaStreamSynchronize(copy_);
  cudaStreamSynchronize(compute_);  // the prediction slot's copies are on it
}

const DeviceBatch& BatchStaging::Acquire(const ValidatedBatch& batch, bool labels, int64_t token) {
  if (staged_ >= 0 && token != 0 && token == staged_token_ &&
      slots_[staged_].device.shape == ShapeOf(batch.view, labels)) {
    current_ = staged_;
    staged_ = -1;
    CheckCuda(cudaStreamWaitEvent(compute_, slots_[current_].copied, 0), "cudaStreamWaitEvent");
    return slots_[current_].device;
  }
  if (staged_ >= 0) current_ = 1 - staged_;  // leave a copy in flight alone
  staged_ = -1;
  Slot& s = slots_[current_];
  StageInto(s, batch, labels, copy_);
  CheckCuda(cudaStreamWaitEvent(compute_, s.copied, 0), "cudaStreamWaitEvent");
  return s.device;
}

const DeviceBatch& BatchStaging::AcquireForPredict(const ValidatedBatch& batch) {
  StageInto(predict_, batch, false, compute_);
  return predict_.device;
}

void BatchStaging::Prefetch(const ValidatedBatch& next, int64_t token) {
  staged_ = -1;
  const int target = 1 - current_;
  StageInto(slots_[target], next, true, copy_);
  staged_ = target;
  staged_token_ = token;
}

void BatchStaging::StageInto(Slot& s, const ValidatedBatch& next, bool labels,
                             cudaStream_t stream) {
  // Its pinned buffers may still be the source of its previous copy.
  CheckCuda(cudaEventSynchronize(s.copied), "cudaEventSynchronize (copy)");
  const BatchView& v = next.view;
  const size_t num_ids = static_cast<size_t>(v.num_ids);
  s.device.Reserve(v, next.offsets.size(), labels);
  try {
    Stage(s.ids, s.device.ids, v.ids, num_ids, stream);  // validated: below kMaxDeviceRows
    Stage(s.weights, s.device.weights, v.weights, num_ids, stream);
    Stage(s.dense, s.device.dense, v.dense, DenseCount(v), stream);
    if (labels)
      Stage(s.labels, s.device.labels, v.labels, static_cast<size_t>(v.batch_size), stream);
    Stage(s.offsets, s.device.offsets, next.offsets.data(), next.offsets.size(), stream);
  } catch (...) {
    // What was enqueued still reads the pinned buffers: the next staging waits for it.
    cudaEventRecord(s.copied, stream);
    throw;
  }
  CheckCuda(cudaEventRecord(s.copied, stream), "cudaEventRecord (copy)");
}

}  // namespace dlrm::cuda

// One training step captured as a CUDA graph and replayed: the ~50 kernel launches and
// cuBLASLt calls of a step become one launch, which is what a step of a small model is
// otherwise bound by (host launch overhead, not the device).
//
// A graph names the device arrays it was captured with, so it is replayed only for a batch
// of the same shape in the same staging slot of the same generation (batch_staging.h); the
// caller drops every graph when a step of another shape may have moved a shared array.
// Per-step scalars live in device memory the caller writes before each replay.
//
// Memory: owns the instantiated graph. Threading: one thread at a time.
// Errors: kInternal naming the CUDA call; a failed capture leaves no graph and says that
// `device.cuda_graph: false` runs steps eagerly.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <functional>

#include "engine/cuda/batch_staging.h"

namespace dlrm::cuda {

class StepGraph {
 public:
  struct Key {
    BatchShape shape;
    uint64_t generation = 0;
  };

  StepGraph() = default;
  ~StepGraph() { Reset(); }
  StepGraph(const StepGraph&) = delete;
  StepGraph& operator=(const StepGraph&) = delete;

  bool Matches(const Key& key) const {
    return exec_ != nullptr && key.shape == key_.shape && key.generation == key_.generation;
  }
  // Records what `enqueue` enqueues on `stream` (nothing runs) and instantiates it for `key`.
  // `stream` must not be capturing already; `enqueue` must not synchronize or allocate.
  void Capture(const Key& key, cudaStream_t stream, const std::function<void()>& enqueue);
  // Enqueues the captured step on `stream`.
  void Launch(cudaStream_t stream) const;
  void Reset();

 private:
  Key key_;
  cudaGraphExec_t exec_ = nullptr;
};

}  // namespace dlrm::cuda

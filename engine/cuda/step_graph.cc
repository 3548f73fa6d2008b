#include "engine/cuda/step_graph.h"

#include <exception>

#include "engine/core/status.h"
#include "engine/cuda/device.h"

namespace dlrm::cuda {
namespace {

constexpr const char* kEagerHint = " (device.cuda_graph: false runs every step eagerly)";

// Ends the capture on `stream` and frees what it recorded (after a failure).
void AbandonCapture(cudaStream_t stream) {
  cudaGraph_t graph = nullptr;
  cudaStreamEndCapture(stream, &graph);
  if (graph != nullptr) cudaGraphDestroy(graph);
  cudaGetLastError();  // the capture's error is reported by the caller
}

}  // namespace

void StepGraph::Capture(const Key& key, cudaStream_t stream, const std::function<void()>& enqueue) {
  Reset();
  CheckCuda(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal),
            "cudaStreamBeginCapture");
  try {
    enqueue();
  } catch (const Error& e) {
    AbandonCapture(stream);
    Throw(StatusCode::kInternal, "capturing the training step as a CUDA graph failed: ", e.what(),
          kEagerHint);
  } catch (...) {
    AbandonCapture(stream);
    throw;
  }
  cudaGraph_t graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(stream, &graph);
  if (ended != cudaSuccess || graph == nullptr) {
    if (graph != nullptr) cudaGraphDestroy(graph);
    Throw(StatusCode::kInternal, "cudaStreamEndCapture: ", cudaGetErrorString(ended), kEagerHint);
  }
  const cudaError_t made = cudaGraphInstantiate(&exec_, graph, 0);
  cudaGraphDestroy(graph);
  if (made != cudaSuccess) {
    exec_ = nullptr;
    Throw(StatusCode::kInternal, "cudaGraphInstantiate: ", cudaGetErrorString(made), kEagerHint);
  }
  key_ = key;
}

void StepGraph::Launch(cudaStream_t stream) const {
  CheckCuda(cudaGraphLaunch(exec_, stream), "cudaGraphLaunch");
}

void StepGraph::Reset() {
  if (exec_ != nullptr) cudaGraphExecDestroy(exec_);
  exec_ = nullptr;
}

}  // namespace dlrm::cuda

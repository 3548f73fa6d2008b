// The MLP's fully connected layer on a CUDA device: y = act(x W^T + b) with W [out x in]
// row-major, the CPU's layout (engine/dense/linear.h), so parameters copy as they are.
//
// GEMMs run on cuBLASLt (cublas_lt.h) at the context's MatmulPrecision: kHighest is fp32
// on the CUDA cores (CUBLAS_COMPUTE_32F), kHigh and kMedium let the tensor cores multiply
// TF32 or bf16 operands with fp32 accumulation (device.matmul_precision); the bias and the
// ReLU are fused into the forward GEMM's epilogue. Every GEMM is deterministic run to
// run: the algorithm is chosen once per shape by cuBLASLt's heuristic with reduction
// schemes that use atomics excluded, and then reused. The bias gradient is a column sum
// in a fixed order (own kernel), never atomics. Results agree with the CPU within fp32
// rounding at kHighest, not bitwise (a GEMM's summation order is cuBLASLt's); within the
// operands' rounding (about 1e-3 relative for TF32, 1e-2 for bf16) otherwise.
//
// Memory: every pointer is device memory, borrowed for the call; the workspace is the
// context's. Thread safety: a LinearContext is used by one thread (one stream) at a time.
// Errors: kInvalidArgument for bad sizes, naming them; kInternal for CUDA/cuBLAS failures.
#pragma once

#include <cuda_runtime.h>

#include <array>
#include <cstdint>
#include <map>
#include <memory>

#include "engine/cuda/cublas_lt.h"
#include "engine/cuda/device_buffer.h"

namespace dlrm::cuda {

enum class DeviceActivation { kNone, kRelu };
// torch.set_float32_matmul_precision's three settings (config DeviceConfig.MatmulPrecision).
enum class MatmulPrecision { kHighest, kHigh, kMedium };

// A cuBLASLt handle, its workspace and the algorithms chosen so far, on one stream.
class LinearContext {
 public:
  // Opens cuBLASLt (kFailedPrecondition naming the files tried when it cannot).
  // algorithm_rank: which of the heuristic's candidates each shape runs, in its order (0,
  // its first choice, is what the engine runs; cuda_linear_bench times the others). A
  // shape with fewer candidates fails its call with kNotFound naming the count.
  explicit LinearContext(cudaStream_t stream, MatmulPrecision precision = MatmulPrecision::kHighest,
                         int algorithm_rank = 0);
  ~LinearContext();
  LinearContext(const LinearContext&) = delete;
  LinearContext& operator=(const LinearContext&) = delete;

  // x [n x in] -> y [n x out]; b may be null (a layer without bias).
  void Forward(const float* x, int64_t n, int in, int out, const float* W, const float* b,
               DeviceActivation act, float* y);

  // The backward of Forward. y: its output (read for kRelu). dy [n x out]: the loss
  // gradient w.r.t. y on entry, w.r.t. the pre-activation on return. dW [out x in] and
  // db [out] are overwritten; dx [n x in] = dy W unless dx is null. db may be null for a
  // layer without bias and without ReLU.
  void Backward(const float* x, const float* y, float* dy, int64_t n, int in, int out,
                const float* W, DeviceActivation act, float* dx, float* dW, float* db);

  cudaStream_t stream() const { return stream_; }

 private:
  struct Gemm;  // one column-major GEMM's shape and epilogue
  void Run(const Gemm& g);
  // dy masked by the ReLU (kRelu) and db = its column sums, in a fixed order.
  void BiasBackward(const float* y, float* dy, int64_t n, int out, DeviceActivation act, float* db);
  const cublasLtMatmulAlgo_t& AlgoFor(const Gemm& g, cublasLtMatmulDesc_t desc,
                                      cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                      cublasLtMatrixLayout_t c);

  const CublasLtApi& api_;
  cudaStream_t stream_;
  const cublasComputeType_t compute_;
  const int algorithm_rank_;
  cublasLtHandle_t handle_ = nullptr;
  DeviceBuffer<uint8_t> workspace_;
  DeviceBuffer<float> bias_partials_;  // Backward's first level of the bias-gradient sum
  // A bias not 16-byte aligned, copied for the epilogue (which may load it as vectors and
  // has no alignment preference to tell the heuristic).
  DeviceBuffer<float> aligned_bias_;
  // (m, n, k, transa, transb, epilogue, lda, ldb, ldc, and the byte alignment of A, B and
  // C) -> the algorithm chosen for it: an algorithm picked for 16-byte aligned operands may
  // not run on a layer whose parameters start 4 bytes past that.
  std::map<std::array<int64_t, 12>, cublasLtMatmulAlgo_t> algos_;
};

}  // namespace dlrm::cuda

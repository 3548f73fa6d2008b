#include <vector>

#include "engine/core/status.h"
#include "engine/cuda/device.h"
#include "engine/cuda/linear.h"

namespace dlrm::cuda {
namespace {

constexpr size_t kWorkspaceBytes = size_t{32} << 20;
// Rows per partial column sum of the bias gradient: the fixed first level of its tree.
constexpr int kBiasChunkRows = 32;
constexpr int kThreads = 256;

constexpr int kRowsInFlight = 8;       // rows whose loads are issued before their sums
constexpr int kMaxAlgorithmRank = 64;  // heuristic candidates a shape may be asked for

// dy's (r, j) with the ReLU's mask applied (zeroed in dy where y <= 0, as the CPU).
__device__ __forceinline__ float MaskedGrad(const float* y, float* dy, int64_t at, float g,
                                            int relu) {
  if (relu && !(y[at] > 0.0f)) {
    dy[at] = 0.0f;
    return 0.0f;
  }
  return g;
}

// dy zeroed where the ReLU was off; partial[c][j] = the sum of dy's column j over chunk
// c's rows, in row order.
__global__ void ReluMaskPartialColumnSums(const float* y, float* dy, int64_t n, int out, int relu,
                                          float* partial) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  const int64_t chunk = blockIdx.y;
  if (j >= out) return;
  const int64_t r0 = chunk * kBiasChunkRows;
  const int64_t r1 = r0 + kBiasChunkRows < n ? r0 + kBiasChunkRows : n;
  float sum = 0.0f;
  int64_t r = r0;
  for (; r + kRowsInFlight <= r1; r += kRowsInFlight) {
    float g[kRowsInFlight];
#pragma unroll
    for (int u = 0; u < kRowsInFlight; ++u) g[u] = dy[(r + u) * out + j];
#pragma unroll
    for (int u = 0; u < kRowsInFlight; ++u)
      sum = __fadd_rn(sum, MaskedGrad(y, dy, (r + u) * out + j, g[u], relu));
  }
  for (; r < r1; ++r) sum = __fadd_rn(sum, MaskedGrad(y, dy, r * out + j, dy[r * out + j], relu));
  partial[chunk * out + j] = sum;
}

// db[j] = the partials of column j added in chunk order, kRowsInFlight loads issued
// before their adds.
__global__ void SumPartials(const float* partial, int64_t chunks, int out, float* db) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= out) return;
  float sum = 0.0f;
  int64_t c = 0;
  for (; c + kRowsInFlight <= chunks; c += kRowsInFlight) {
    float p[kRowsInFlight];
#pragma unroll
    for (int u = 0; u < kRowsInFlight; ++u) p[u] = partial[(c + u) * out + j];
#pragma unroll
    for (int u = 0; u < kRowsInFlight; ++u) sum = __fadd_rn(sum, p[u]);
  }
  for (; c < chunks; ++c) sum = __fadd_rn(sum, partial[c * out + j]);
  db[j] = sum;
}

void CheckSizes(int64_t n, int in, int out) {
  if (n < 1 || in < 1 || out < 1)
    ThrowInvalid("linear layer: n, in and out must be >= 1, got n=", n, " in=", in, " out=", out);
  if (n > INT32_MAX) ThrowInvalid("linear layer: n=", n, " rows is more than 2^31 - 1");
}

// The largest of 16, 8 and 4 bytes that divides p's address (any alignment for none):
// what cuBLASLt's heuristic is told, as it assumes 256 otherwise.
uint32_t AlignmentOf(const void* p) {
  const auto address = reinterpret_cast<uintptr_t>(p);
  for (uint32_t a = 16; a > 4; a /= 2)
    if (address % a == 0) return a;
  return 4;
}

cublasComputeType_t ComputeType(MatmulPrecision p) {
  switch (p) {
    case MatmulPrecision::kHigh: return CUBLAS_COMPUTE_32F_FAST_TF32;
    case MatmulPrecision::kMedium: return CUBLAS_COMPUTE_32F_FAST_16BF;
    default: return CUBLAS_COMPUTE_32F;
  }
}

}  // namespace

// C [m x n] = op(A) op(B) (+ bias, ReLU per epilogue), all column-major.
struct LinearContext::Gemm {
  int64_t m, n, k;
  cublasOperation_t transa, transb;
  const float* A;
  int64_t lda;
  const float* B;
  int64_t ldb;
  float* C;
  int64_t ldc;
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  const float* bias = nullptr;
};

LinearContext::LinearContext(cudaStream_t stream, MatmulPrecision precision, int algorithm_rank)
    : api_(CublasLt()),
      stream_(stream),
      compute_(ComputeType(precision)),
      algorithm_rank_(algorithm_rank) {
  if (algorithm_rank < 0 || algorithm_rank >= kMaxAlgorithmRank)
    ThrowInvalid("algorithm_rank must be in [0, ", kMaxAlgorithmRank, "), got ", algorithm_rank);
  CheckCublas(api_.Create(&handle_), "cublasLtCreate");
  workspace_.Resize(kWorkspaceBytes);
}

LinearContext::~LinearContext() {
  if (handle_ != nullptr) api_.Destroy(handle_);
}

const cublasLtMatmulAlgo_t& LinearContext::AlgoFor(const Gemm& g, cublasLtMatmulDesc_t desc,
                                                   cublasLtMatrixLayout_t a,
                                                   cublasLtMatrixLayout_t b,
                                                   cublasLtMatrixLayout_t c) {
  // A, B, C, and D (which is C: written in place).
  const uint32_t align[4] = {AlignmentOf(g.A), AlignmentOf(g.B), AlignmentOf(g.C),
                             AlignmentOf(g.C)};
  const std::array<int64_t, 12> key = {g.m,   g.n,   g.k,   g.transa, g.transb, g.epilogue,
                                       g.lda, g.ldb, g.ldc, align[0], align[1], align[2]};
  const auto it = algos_.find(key);
  if (it != algos_.end()) return it->second;
  cublasLtMatmulPreference_t pref = nullptr;
  CheckCublas(api_.MatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate");
  const cublasLtMatmulPreferenceAttributes_t aligned[4] = {
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
  for (int i = 0; i < 4; ++i)
    api_.MatmulPreferenceSetAttribute(pref, aligned[i], &align[i], sizeof align[i]);
  const size_t workspace = kWorkspaceBytes;
  // Split-K reductions that add partial results with atomics would change bits run to run.
  const uint32_t schemes = CUBLASLT_REDUCTION_SCHEME_MASK & ~CUBLASLT_REDUCTION_SCHEME_INPLACE;
  api_.MatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace,
                                    sizeof workspace);
  api_.MatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &schemes,
                                    sizeof schemes);
  std::vector<cublasLtMatmulHeuristicResult_t> results(static_cast<size_t>(algorithm_rank_) + 1);
  int found = 0;
  const cublasStatus_t status = api_.MatmulAlgoGetHeuristic(
      handle_, desc, a, b, c, c, pref, algorithm_rank_ + 1, results.data(), &found);
  api_.MatmulPreferenceDestroy(pref);
  CheckCublas(status, "cublasLtMatmulAlgoGetHeuristic");
  if (found == 0)
    Throw(StatusCode::kInternal, "cuBLASLt has no algorithm for a ", g.m, "x", g.n, "x", g.k,
          " fp32 GEMM");
  if (found <= algorithm_rank_)
    Throw(StatusCode::kNotFound, "cuBLASLt offers ", found, " algorithms for a ", g.m, "x", g.n,
          "x", g.k, " fp32 GEMM, not one of rank ", algorithm_rank_);
  return algos_.emplace(key, results[static_cast<size_t>(algorithm_rank_)].algo).first->second;
}

void LinearContext::Run(const Gemm& g) {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  CheckCublas(api_.MatmulDescCreate(&desc, compute_, CUDA_R_32F), "MatmulDescCreate");
  api_.MatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &g.transa, sizeof g.transa);
  api_.MatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &g.transb, sizeof g.transb);
  api_.MatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &g.epilogue, sizeof g.epilogue);
  if (g.bias != nullptr)
    api_.MatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g.bias, sizeof g.bias);
  const bool ta = g.transa != CUBLAS_OP_N, tb = g.transb != CUBLAS_OP_N;
  api_.MatrixLayoutCreate(&a, CUDA_R_32F, ta ? g.k : g.m, ta ? g.m : g.k, g.lda);
  api_.MatrixLayoutCreate(&b, CUDA_R_32F, tb ? g.n : g.k, tb ? g.k : g.n, g.ldb);
  api_.MatrixLayoutCreate(&c, CUDA_R_32F, g.m, g.n, g.ldc);
  const float alpha = 1.0f, beta = 0.0f;
  cublasStatus_t status = CUBLAS_STATUS_SUCCESS;
  try {
    const cublasLtMatmulAlgo_t& algo = AlgoFor(g, desc, a, b, c);
    status = api_.Matmul(handle_, desc, &alpha, g.A, a, g.B, b, &beta, g.C, c, g.C, c, &algo,
                         workspace_.get(), kWorkspaceBytes, stream_);
  } catch (...) {
    status = CUBLAS_STATUS_INTERNAL_ERROR;
  }
  api_.MatrixLayoutDestroy(c);
  api_.MatrixLayoutDestroy(b);
  api_.MatrixLayoutDestroy(a);
  api_.MatmulDescDestroy(desc);
  CheckCublas(status, "cublasLtMatmul");
}

void LinearContext::Forward(const float* x, int64_t n, int in, int out, const float* W,
                            const float* b, DeviceActivation act, float* y) {
  CheckSizes(n, in, out);
  // Row-major y = x W^T is column-major Y [out x n] = W^T(col-major [in x out]) X [in x n].
  Gemm g{out, n, in, CUBLAS_OP_T, CUBLAS_OP_N, W, in, x, in, y, out};
  g.bias = b;
  if (b != nullptr && AlignmentOf(b) < 16) {
    // Grown on the first (eager) call of a shape, so a captured step allocates nothing.
    aligned_bias_.Reserve(static_cast<size_t>(out));
    CheckCuda(cudaMemcpyAsync(aligned_bias_.get(), b, static_cast<size_t>(out) * sizeof(float),
                              cudaMemcpyDeviceToDevice, stream_),
              "cudaMemcpyAsync (bias, aligned)");
    g.bias = aligned_bias_.get();
  }
  const bool relu = act == DeviceActivation::kRelu;
  if (b != nullptr)
    g.epilogue = relu ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_BIAS;
  else
    g.epilogue = relu ? CUBLASLT_EPILOGUE_RELU : CUBLASLT_EPILOGUE_DEFAULT;
  Run(g);
}

void LinearContext::Backward(const float* x, const float* y, float* dy, int64_t n, int in, int out,
                             const float* W, DeviceActivation act, float* dx, float* dW,
                             float* db) {
  CheckSizes(n, in, out);
  if (db != nullptr || act == DeviceActivation::kRelu) BiasBackward(y, dy, n, out, act, db);
  // dW [out x in] row-major = column-major [in x out] = X [in x n] dY^T ([n x out]).
  Run(Gemm{in, out, n, CUBLAS_OP_N, CUBLAS_OP_T, x, in, dy, out, dW, in});
  // dx [n x in] row-major = column-major [in x n] = W (col-major [in x out]) dY [out x n].
  if (dx != nullptr) Run(Gemm{in, n, out, CUBLAS_OP_N, CUBLAS_OP_N, W, in, dy, out, dx, in});
}

void LinearContext::BiasBackward(const float* y, float* dy, int64_t n, int out,
                                 DeviceActivation act, float* db) {
  DLRM_INTERNAL_CHECK(db != nullptr);  // a ReLU layer has a bias
  const int64_t chunks = (n + kBiasChunkRows - 1) / kBiasChunkRows;
  // Grown once to the largest layer; reused (ordered on the stream) by every call.
  if (bias_partials_.size() < static_cast<size_t>(chunks) * out)
    bias_partials_.Resize(static_cast<size_t>(chunks) * out);
  float* partial = bias_partials_.get();
  const dim3 grid(GridBlocks(out, kThreads), static_cast<unsigned>(chunks));
  ReluMaskPartialColumnSums<<<grid, kThreads, 0, stream_>>>(
      y, dy, n, out, act == DeviceActivation::kRelu ? 1 : 0, partial);
  SumPartials<<<GridBlocks(out, kThreads), kThreads, 0, stream_>>>(partial, chunks, out, db);
  CheckCuda(cudaGetLastError(), "bias gradient kernels");
}

}  // namespace dlrm::cuda

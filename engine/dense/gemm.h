// Row-major GEMM for float and double: BLAS, or for float the engine's AVX-512 kernel where
// the CPU has AVX-512F, and its bf16 kernel when asked (sgemm_avx512.h).
//
// The engine threads over fixed-size row chunks itself and runs every GEMM single-threaded:
// a chunk's result is then the same whichever thread computes it (determinism contract).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

namespace dlrm {

// What a float GEMM multiplies: fp32 operands, or operands rounded to bf16 with fp32 sums
// (device.matmul_precision MEDIUM; only where CpuHasAvx512Bf16() and not AmxBf16Refused(),
// which the model checks: AMX's tiles where CpuHasAmxBf16(), else AVX512-BF16).
enum class GemmPrecision { kFp32, kBf16 };

// B operands packed once and kept for the GEMMs of one step (or one prediction): a
// layer's weights are multiplied by every chunk of a batch, and the engine's AVX-512
// kernels otherwise pack them again for each chunk (the smaller the chunk, the larger that
// share). Keyed by the operand's address, shape, transposition and precision, so the
// owner must Reset() the cache whenever what those addresses hold may change (DlrmModel
// leases one per call and resets it first). Results are bitwise those of uncached calls.
// Threading: Gemm calls sharing a cache may run concurrently (the first to need an
// operand packs it, the others wait for it); Reset must not run concurrently with them.
class GemmPackCache {
 public:
  GemmPackCache();
  ~GemmPackCache();
  GemmPackCache(const GemmPackCache&) = delete;
  GemmPackCache& operator=(const GemmPackCache&) = delete;

  // Forgets every packed operand; their storage is kept for the next ones.
  void Reset();
  // For Gemm: op(B) [K x N] packed for the AVX-512 kernels (bf16 or not), packed now if
  // this cache does not hold it yet.
  const uint32_t* Packed(const float* B, bool trans_b, int64_t N, int64_t K, int64_t ldb,
                         bool bf16);

 private:
  struct Entry;
  std::mutex mu_;
  std::vector<std::unique_ptr<Entry>> entries_;
};

// C[M x N] = alpha * op(A) * op(B) + beta * C, all row-major.
// op(A) is [M x K]: A is [M x K] (lda >= K) or, transposed, [K x M] (lda >= M).
// kBf16 is for T = float. b_cache: keep op(B) packed there for later calls with the same B
// (float on the AVX-512 kernels; ignored elsewhere); only for a B that stays unchanged
// until the cache is Reset (weights within a step, never activations).
template <typename T>
void Gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha, const T* A,
          int64_t lda, const T* B, int64_t ldb, T beta, T* C, int64_t ldc,
          GemmPrecision precision = GemmPrecision::kFp32, GemmPackCache* b_cache = nullptr);

// Makes the BLAS library run on the calling thread only. Idempotent; called by Gemm.
void EnsureSingleThreadedBlas();

}  // namespace dlrm

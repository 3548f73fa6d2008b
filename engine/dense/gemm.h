// Row-major GEMM for float and double: BLAS, or for float the engine's AVX-512 kernel where
// the CPU has AVX-512F, and its bf16 kernel when asked (sgemm_avx512.h).
//
// The engine threads over fixed-size row chunks itself and runs every GEMM single-threaded:
// a chunk's result is then the same whichever thread computes it (determinism contract).
#pragma once

#include <cstdint>

namespace dlrm {

// What a float GEMM multiplies: fp32 operands, or operands rounded to bf16 with fp32 sums
// (device.matmul_precision MEDIUM; only where CpuHasAvx512Bf16(), which the model checks).
enum class GemmPrecision { kFp32, kBf16 };

// C[M x N] = alpha * op(A) * op(B) + beta * C, all row-major.
// op(A) is [M x K]: A is [M x K] (lda >= K) or, transposed, [K x M] (lda >= M).
// kBf16 is for T = float.
template <typename T>
void Gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha, const T* A,
          int64_t lda, const T* B, int64_t ldb, T beta, T* C, int64_t ldc,
          GemmPrecision precision = GemmPrecision::kFp32);

// Makes the BLAS library run on the calling thread only. Idempotent; called by Gemm.
void EnsureSingleThreadedBlas();

}  // namespace dlrm

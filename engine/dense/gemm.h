// Row-major GEMM for float and double: BLAS, or for float the engine's AVX-512 kernel where
// the CPU has AVX-512F (sgemm_avx512.h).
//
// The engine threads over fixed-size row chunks itself and runs every GEMM single-threaded:
// a chunk's result is then the same whichever thread computes it (determinism contract).
#pragma once

#include <cstdint>

namespace dlrm {

// C[M x N] = alpha * op(A) * op(B) + beta * C, all row-major.
// op(A) is [M x K]: A is [M x K] (lda >= K) or, transposed, [K x M] (lda >= M).
template <typename T>
void Gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha, const T* A,
          int64_t lda, const T* B, int64_t ldb, T beta, T* C, int64_t ldc);

// Makes the BLAS library run on the calling thread only. Idempotent; called by Gemm.
void EnsureSingleThreadedBlas();

}  // namespace dlrm

// Single-precision GEMM with AVX-512, the engine's own (BLIS-style packing and a 12 x 32
// register-blocked micro-kernel), used by Gemm<float> where the CPU has AVX-512F; and its
// bf16 twins (the same loops, bf16 operands) where the CPU has AVX512-BF16, or AMX's tiles
// (a 32 x 32 block of C in four of them).
//
// Why not BLAS there: Debian's OpenBLAS 0.3.21 picks its kernels by CPU model, and on
// CPUs newer than it knows (AMD Zen 4/5) it falls back to its AVX2 (Haswell) kernels,
// half the machine's single-precision FLOP/s. The same OpenBLAS forced to its AVX-512
// kernels (OPENBLAS_CORETYPE=SkylakeX) runs 1.9x faster there, which only the host
// process's environment can ask for; this kernel asks the CPU instead.
//
// Each element of C is one fixed-order sum: k ascending, in blocks of kGemmKc, each block
// summed in a register from zero and then added to C. It does not depend on M, N, the
// row or column of the element or the thread, so a chunk's rows come out the same
// whichever chunking or thread computes them (the determinism contract).
#pragma once

#include <cstdint>

namespace dlrm {

// The K block: a sum over k in [b * kGemmKc, (b + 1) * kGemmKc) is formed in a register,
// then added to C (so K <= kGemmKc gives one rounding per k and one store).
inline constexpr int64_t kGemmKc = 256;
// SbgemmAvx512's K block: as many packed words (two k values each) as kGemmKc, so its B
// panel fills L1 as the fp32 kernel's does.
inline constexpr int64_t kSbgemmKc = 2 * kGemmKc;

// C[M x N] = alpha * op(A) * op(B) + beta * C, all row-major, as cblas_sgemm with
// CblasRowMajor. beta == 0 never reads C (NaN there is overwritten). Callers check
// CpuHasAvx512() and the arguments first (Gemm<float> does); M, N, K > 0.
void SgemmAvx512(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                 const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
                 int64_t ldc);

// The same product with op(A) and op(B) rounded to bf16 (to nearest even) and multiplied by
// AVX512-BF16's vdpbf16ps, which adds the products of k and k + 1 to an fp32 sum in one
// step: 32 multiply-adds per instruction where the fp32 kernel's FMA does 16. Each element
// of C is again one fixed-order sum (k pairs ascending, K blocks of kSbgemmKc), so the
// determinism contract holds. vdpbf16ps ignores MXCSR: it takes subnormal bf16 operands
// as zero and flushes subnormal results to zero, on every CPU alike (so bf16 products
// of values below 2^-126 vanish; the fp32 kernel keeps them). Callers check
// CpuHasAvx512Bf16() first.
void SbgemmAvx512(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                  const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
                  int64_t ldc);

// The same bf16 product on AMX's tiles: each tdpbf16ps adds 16 k pairs of a 16 x 32 bf16
// tile of op(A) times a 32 x 16 tile of op(B) to a 16 x 16 fp32 tile of sums (256 multiply-
// adds per k pair where vdpbf16ps does 16). The loops and blocks are SbgemmAvx512's, so
// each element of C is again one fixed-order sum: K blocks of kSbgemmKc, each summed from
// zero in a tile, 16 pairs per instruction in ascending order (a K block's last pairs
// padded with zeros to 16). Within an instruction the hardware rounds its own way, so the
// bits differ from SbgemmAvx512's (not the determinism contract: one kernel per process,
// DLRM_MAX_ISA=avx512 chooses the other). Subnormals as vdpbf16ps. Callers check
// CpuHasAmxBf16() first (it also asks Linux for the tile state).
void SbgemmAmx(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
               const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
               int64_t ldc);

// The bf16 product on this process's kernel: SbgemmAmx where CpuHasAmxBf16(), else
// SbgemmAvx512 (the packed-B functions below choose alike). Callers check
// CpuHasAvx512Bf16() first.
void Sbgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
            const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
            int64_t ldc);

// The first 64-byte aligned element at or after `data`: packed panels are loaded with
// aligned full-width loads, so a packing buffer holds 64 / sizeof(T) spare elements.
template <typename T>
T* AlignedTo64(T* data) {
  const auto address = reinterpret_cast<uintptr_t>(data);
  return data + ((64 - address % 64) % 64) / sizeof(T);
}

// op(B) [K x N] packed once, for several products with the same B (a layer's weights times
// every chunk of a step): the words PackBAvx512 writes (bf16: Sbgemm's kernel's layout,
// else SgemmAvx512's; fp32 values are stored in the words' bits), and the product of an op(A)
// with it, the same sums in the same order as the unpacked call (bitwise its result).
// dst must hold PackedBAvx512Words(bf16, N, K) words, 64-byte aligned.
int64_t PackedBAvx512Words(bool bf16, int64_t N, int64_t K);
void PackBAvx512(bool bf16, bool trans_b, int64_t N, int64_t K, const float* B, int64_t ldb,
                 uint32_t* dst);
void GemmAvx512PackedB(bool bf16, bool trans_a, int64_t M, int64_t N, int64_t K, float alpha,
                       const float* A, int64_t lda, const uint32_t* packed_b, float beta, float* C,
                       int64_t ldc);

}  // namespace dlrm

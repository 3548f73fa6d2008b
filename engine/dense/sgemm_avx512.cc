#include "engine/dense/sgemm_avx512.h"

#if defined(__x86_64__)
#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <vector>

#include "engine/core/cpu_features.h"

#define DLRM_AVX512 __attribute__((target("avx512f,fma")))

// GCC 12's AVX-512 headers build their "undefined" pass-through operands as `__m512 x = x`,
// which -Wmaybe-uninitialized (and, inlined into the bf16 kernel's packing,
// -Wuninitialized) reports once the intrinsics are inlined here.
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

namespace dlrm {
namespace {

// Register block: 12 rows x 32 columns = 24 zmm accumulators, 2 for B, 1 broadcast.
constexpr int64_t kMr = 12;
constexpr int64_t kNr = 32;
constexpr int64_t kLanes = 16;
// Cache blocks: a packed B panel (kGemmKc x kNr, 32 KiB) stays in L1 while the micro-kernel
// sweeps a packed A block (kMc x kGemmKc, 192 KiB) held in L2; the packed B block
// (kGemmKc x kNc, up to 2 MiB) is reused across every A block from L2/L3.
constexpr int64_t kMc = 16 * kMr;
constexpr int64_t kNc = 2048;
static_assert(kNc % kNr == 0, "kNc must be a multiple of the register block");

// Packing scratch, one per thread and reused by every call (no allocation per GEMM once
// warm). Thread-local because the engine's pool threads each run single-threaded GEMMs.
// T: float, or uint32_t for words of two bf16 values.
template <typename T>
class PackBuffer {
 public:
  T* Get(size_t count) {
    if (count + kLanes > storage_.size()) storage_.resize(count + kLanes);
    return AlignedTo64(storage_.data());
  }

 private:
  std::vector<T> storage_;
};

__mmask16 LaneMask(int64_t count) {
  return count >= kLanes ? static_cast<__mmask16>(0xFFFF)
                         : static_cast<__mmask16>((1u << std::max<int64_t>(count, 0)) - 1);
}

// op(A) rows [i0, i0 + mc), columns [k0, k0 + kc) into row panels of kMr: panel p holds,
// for each k, the kMr values of rows i0 + p * kMr + r. Rows past mc are zero.
DLRM_AVX512 void PackA(bool trans_a, const float* A, int64_t lda, int64_t i0, int64_t k0,
                       int64_t mc, int64_t kc, float* dst) {
  for (int64_t p = 0; p < mc; p += kMr) {
    const int64_t rows = std::min(kMr, mc - p);
    float* panel = dst + p * kc;
    if (trans_a) {  // op(A)(i, k) = A[k * lda + i]: kMr consecutive values per k
      const float* src = A + k0 * lda + i0 + p;
      const __mmask16 mask = LaneMask(rows);
      for (int64_t k = 0; k < kc; ++k) {
        const __m512 v = _mm512_maskz_loadu_ps(mask, src + k * lda);
        _mm512_mask_storeu_ps(panel + k * kMr, static_cast<__mmask16>(0x0FFF), v);
      }
    } else {  // op(A)(i, k) = A[i * lda + k]: a transpose of the panel's rows
      for (int64_t r = 0; r < rows; ++r) {
        const float* src = A + (i0 + p + r) * lda + k0;
        for (int64_t k = 0; k < kc; ++k) panel[k * kMr + r] = src[k];
      }
      for (int64_t r = rows; r < kMr; ++r) {
        for (int64_t k = 0; k < kc; ++k) panel[k * kMr + r] = 0.0f;
      }
    }
  }
}

// 16 x 16 transpose in registers: on return row[c] holds what was column c.
DLRM_AVX512 void Transpose16x16(__m512 row[16]) {
  __m512 t[16], u[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(row[2 * i], row[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(row[2 * i], row[2 * i + 1]);
  }
  // u[4g + e], 128-bit lane L: rows 4g .. 4g + 3 of column 4L + e.
  for (int g = 0; g < 4; ++g) {
    const __m512d lo0 = _mm512_castps_pd(t[4 * g]), hi0 = _mm512_castps_pd(t[4 * g + 1]);
    const __m512d lo1 = _mm512_castps_pd(t[4 * g + 2]), hi1 = _mm512_castps_pd(t[4 * g + 3]);
    u[4 * g + 0] = _mm512_castpd_ps(_mm512_unpacklo_pd(lo0, lo1));
    u[4 * g + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(lo0, lo1));
    u[4 * g + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(hi0, hi1));
    u[4 * g + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(hi0, hi1));
  }
  for (int e = 0; e < 4; ++e) {
    const __m512 v0 = _mm512_shuffle_f32x4(u[e], u[4 + e], 0x88);
    const __m512 v1 = _mm512_shuffle_f32x4(u[e], u[4 + e], 0xdd);
    const __m512 w0 = _mm512_shuffle_f32x4(u[8 + e], u[12 + e], 0x88);
    const __m512 w1 = _mm512_shuffle_f32x4(u[8 + e], u[12 + e], 0xdd);
    row[e] = _mm512_shuffle_f32x4(v0, w0, 0x88);
    row[8 + e] = _mm512_shuffle_f32x4(v0, w0, 0xdd);
    row[4 + e] = _mm512_shuffle_f32x4(v1, w1, 0x88);
    row[12 + e] = _mm512_shuffle_f32x4(v1, w1, 0xdd);
  }
}

// op(B) rows [k0, k0 + kc), columns [j0, j0 + nc) into column panels of kNr: panel q
// holds, for each k, the kNr values of columns j0 + q * kNr + c. Columns past nc are zero.
DLRM_AVX512 void PackB(bool trans_b, const float* B, int64_t ldb, int64_t k0, int64_t j0,
                       int64_t kc, int64_t nc, float* dst) {
  for (int64_t q = 0; q < nc; q += kNr) {
    const int64_t cols = std::min(kNr, nc - q);
    float* panel = dst + q * kc;
    if (!trans_b) {  // op(B)(k, j) = B[k * ldb + j]: kNr consecutive values per k
      const float* src = B + k0 * ldb + j0 + q;
      const __mmask16 m0 = LaneMask(cols), m1 = LaneMask(cols - kLanes);
      for (int64_t k = 0; k < kc; ++k) {
        _mm512_store_ps(panel + k * kNr, _mm512_maskz_loadu_ps(m0, src + k * ldb));
        _mm512_store_ps(panel + k * kNr + kLanes,
                        _mm512_maskz_loadu_ps(m1, src + k * ldb + kLanes));
      }
      continue;
    }
    // op(B)(k, j) = B[j * ldb + k]: 16 x 16 tiles, each transposed in registers.
    for (int64_t half = 0; half < kNr; half += kLanes) {
      const int64_t half_cols = std::min(kLanes, cols - half);
      for (int64_t kk = 0; kk < kc; kk += kLanes) {
        const __mmask16 k_mask = LaneMask(kc - kk);
        __m512 tile[16];
        for (int64_t c = 0; c < kLanes; ++c) {
          tile[c] = c < half_cols
                        ? _mm512_maskz_loadu_ps(k_mask, B + (j0 + q + half + c) * ldb + k0 + kk)
                        : _mm512_setzero_ps();
        }
        Transpose16x16(tile);
        const int64_t ks = std::min(kLanes, kc - kk);
        for (int64_t t = 0; t < ks; ++t) _mm512_store_ps(panel + (kk + t) * kNr + half, tile[t]);
      }
    }
  }
}

// The accumulator block, zeroed.
DLRM_AVX512 void ZeroTile(__m512 (&acc)[kMr][2]) {
#pragma GCC unroll 12
  for (int r = 0; r < kMr; ++r) {
    acc[r][0] = _mm512_setzero_ps();
    acc[r][1] = _mm512_setzero_ps();
  }
}

// Asks for the C tile [rows x cols] ahead of StoreTile: the micro-kernel's thousands of
// cycles hide the misses of its rows, which sit ldc apart where no hardware prefetcher
// follows them and where the layer's other work evicted them. A read prefetch: these
// targets lack PREFETCHW, for which GCC emits nothing.
inline void PrefetchTile(const float* c, int64_t ldc, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    __builtin_prefetch(c + r * ldc);
    __builtin_prefetch(c + r * ldc + cols - 1);
  }
}

// C tile [rows x cols] = alpha * acc + beta * C; beta == 0 leaves C unread. Inlined, so
// the accumulators go from registers to C (called, they took a trip through the stack
// that was ~6% of a bf16 step in mlperf_dcnv2's profile).
template <int64_t Rows>
DLRM_AVX512 __attribute__((always_inline)) inline void StoreTile(const __m512 (&acc)[Rows][2],
                                                                 float* c, int64_t ldc,
                                                                 int64_t rows, int64_t cols,
                                                                 float alpha, float beta) {
  const __mmask16 m0 = LaneMask(cols), m1 = LaneMask(cols - kLanes);
  const __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
  for (int r = 0; r < rows; ++r) {
    float* row = c + r * ldc;
    __m512 y0 = _mm512_mul_ps(acc[r][0], va), y1 = _mm512_mul_ps(acc[r][1], va);
    if (beta != 0.0f) {
      y0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m0, row), vb, y0);
      y1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m1, row + kLanes), vb, y1);
    }
    _mm512_mask_storeu_ps(row, m0, y0);
    _mm512_mask_storeu_ps(row + kLanes, m1, y1);
  }
}

// C tile [rows x cols] (at most kMr x kNr) = alpha * (a_panel x b_panel) + beta * C, the
// product summed over k ascending in registers. beta == 0 leaves C unread.
DLRM_AVX512 void MicroKernel(int64_t kc, const float* a, const float* b, float* c, int64_t ldc,
                             int64_t rows, int64_t cols, float alpha, float beta) {
  __m512 acc[kMr][2];
  ZeroTile(acc);
  PrefetchTile(c, ldc, rows, cols);
  for (int64_t k = 0; k < kc; ++k) {
    const __m512 b0 = _mm512_load_ps(b + k * kNr);
    const __m512 b1 = _mm512_load_ps(b + k * kNr + kLanes);
    const float* ak = a + k * kMr;
#pragma GCC unroll 12
    for (int r = 0; r < kMr; ++r) {
      const __m512 ar = _mm512_set1_ps(ak[r]);
      acc[r][0] = _mm512_fmadd_ps(ar, b0, acc[r][0]);
      acc[r][1] = _mm512_fmadd_ps(ar, b1, acc[r][1]);
    }
  }
  StoreTile(acc, c, ldc, rows, cols, alpha, beta);
}

// ---- bf16: words of two bf16 values, k even in the low half and k + 1 in the high ----

#define DLRM_AVX512_BF16 __attribute__((target("avx512f,avx512bw,avx512bf16,fma")))

// The bf16 words of rows k and k + 1 across 16 columns: word j = (lo[j], hi[j]), each
// rounded to nearest even (NaN stays NaN).
DLRM_AVX512_BF16 __m512i InterleavePairs(__m512 lo, __m512 hi) {
  // cvtne2ps_pbh puts its second operand in elements 0-15 and its first in 16-31.
  const __m512i halves = reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo));
  const __m512i order = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24,
                                         8, 23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  return _mm512_permutexvar_epi16(order, halves);
}

// The 16 words of 32 consecutive k values (src[0, count), zeros past it).
DLRM_AVX512_BF16 __m512 ConsecutivePairs(const float* src, int64_t count) {
  const __m512 lo = _mm512_maskz_loadu_ps(LaneMask(count), src);
  const __m512 hi = _mm512_maskz_loadu_ps(LaneMask(count - kLanes), src + kLanes);
  return reinterpret_cast<__m512>(_mm512_cvtne2ps_pbh(hi, lo));
}

// Rows of `rows` values, k consecutive in each (row c at src + c * ld): 16 k-pair words
// per 32 k, transposed so that dst[w * stride + c] is row c's word w. kc: k values left.
DLRM_AVX512_BF16 void PackPairRows(const float* src, int64_t ld, int64_t rows, int64_t kc,
                                   uint32_t* dst, int64_t stride, __mmask16 store_mask) {
  for (int64_t kk = 0; kk < kc; kk += 2 * kLanes) {
    __m512 tile[16];
    for (int64_t c = 0; c < kLanes; ++c)
      tile[c] = c < rows ? ConsecutivePairs(src + c * ld + kk, kc - kk) : _mm512_setzero_ps();
    Transpose16x16(tile);
    const int64_t words = std::min(kLanes, (kc - kk + 1) / 2);
    for (int64_t w = 0; w < words; ++w)
      _mm512_mask_storeu_ps(reinterpret_cast<float*>(dst + (kk / 2 + w) * stride), store_mask,
                            tile[w]);
  }
}

// Rows k of `count` consecutive values (row k at src + k * ld, kc rows): word w of column
// c = (row 2w, row 2w + 1) of c, stored at dst[w * stride + c] under store_mask.
DLRM_AVX512_BF16 void PackPairColumns(const float* src, int64_t ld, int64_t count, int64_t kc,
                                      uint32_t* dst, int64_t stride, __mmask16 store_mask) {
  const __mmask16 mask = LaneMask(count);
  for (int64_t w = 0; w < (kc + 1) / 2; ++w) {
    const float* k_row = src + 2 * w * ld;
    const __m512 lo = _mm512_maskz_loadu_ps(mask, k_row);
    const __m512 hi =
        2 * w + 1 < kc ? _mm512_maskz_loadu_ps(mask, k_row + ld) : _mm512_setzero_ps();
    _mm512_mask_storeu_epi32(dst + w * stride, store_mask, InterleavePairs(lo, hi));
  }
}

// `count` rows or columns of op(X) from `first` on, kc values of k each, as words at
// dst[w * stride + c]: k runs along memory (X[c * ld + k]) where k_along_rows, else
// across rows (X[k * ld + c]).
DLRM_AVX512_BF16 void PackPairs(bool k_along_rows, const float* X, int64_t ld, int64_t first,
                                int64_t k0, int64_t count, int64_t kc, uint32_t* dst,
                                int64_t stride, __mmask16 store_mask) {
  if (k_along_rows)
    PackPairRows(X + first * ld + k0, ld, count, kc, dst, stride, store_mask);
  else
    PackPairColumns(X + k0 * ld + first, ld, count, kc, dst, stride, store_mask);
}

// PackA's layout in words: panel p holds, for each k pair, the kMr words of its rows.
DLRM_AVX512_BF16 void PackABf16(bool trans_a, const float* A, int64_t lda, int64_t i0, int64_t k0,
                                int64_t mc, int64_t kc, uint32_t* dst) {
  for (int64_t p = 0; p < mc; p += kMr)  // op(A)(i, k) = A[i * lda + k] unless trans_a
    PackPairs(!trans_a, A, lda, i0 + p, k0, std::min(kMr, mc - p), kc, dst + p * ((kc + 1) / 2),
              kMr, 0x0FFF);
}

// PackB's layout in words: panel q holds, for each of `words` k pairs, the kNr words of its
// columns, packed 16 columns at a time; pairs past kc (words > (kc + 1) / 2) are zero.
DLRM_AVX512_BF16 void PackBPairs(bool trans_b, const float* B, int64_t ldb, int64_t k0, int64_t j0,
                                 int64_t kc, int64_t nc, int64_t words, uint32_t* dst) {
  for (int64_t q = 0; q < nc; q += kNr) {
    uint32_t* panel = dst + q * words;
    for (int64_t half = 0; half < kNr; half += kLanes) {  // op(B)(k, j) = B[j * ldb + k] if trans_b
      const int64_t cols = std::max<int64_t>(0, std::min(kLanes, nc - q - half));
      PackPairs(trans_b, B, ldb, j0 + q + half, k0, cols, kc, panel + half, kNr, 0xFFFF);
    }
    std::fill(panel + (kc + 1) / 2 * kNr, panel + words * kNr, 0u);
  }
}

// MicroKernel over k pairs: each vdpbf16ps adds a_k b_k + a_{k+1} b_{k+1} (bf16 products,
// fp32 sums) to a lane, in ascending pairs.
DLRM_AVX512_BF16 void MicroKernelBf16(int64_t words, const uint32_t* a, const uint32_t* b, float* c,
                                      int64_t ldc, int64_t rows, int64_t cols, float alpha,
                                      float beta) {
  __m512 acc[kMr][2];
  ZeroTile(acc);
  PrefetchTile(c, ldc, rows, cols);
  for (int64_t w = 0; w < words; ++w) {
    const auto b0 = reinterpret_cast<__m512bh>(_mm512_load_si512(b + w * kNr));
    const auto b1 = reinterpret_cast<__m512bh>(_mm512_load_si512(b + w * kNr + kLanes));
    const uint32_t* aw = a + w * kMr;
#pragma GCC unroll 12
    for (int r = 0; r < kMr; ++r) {
      const auto ar = reinterpret_cast<__m512bh>(_mm512_set1_epi32(static_cast<int>(aw[r])));
      acc[r][0] = _mm512_dpbf16_ps(acc[r][0], ar, b0);
      acc[r][1] = _mm512_dpbf16_ps(acc[r][1], ar, b1);
    }
  }
  StoreTile(acc, c, ldc, rows, cols, alpha, beta);
}

struct Bf16Kernel {
  using Word = uint32_t;
  static constexpr int64_t kRows = kMr;
  static constexpr int64_t kKc = kSbgemmKc;
  static int64_t Words(int64_t kc) { return (kc + 1) / 2; }
  static void PackA(bool t, const float* A, int64_t lda, int64_t i0, int64_t k0, int64_t mc,
                    int64_t kc, Word* dst) {
    PackABf16(t, A, lda, i0, k0, mc, kc, dst);
  }
  static void PackB(bool t, const float* B, int64_t ldb, int64_t k0, int64_t j0, int64_t kc,
                    int64_t nc, Word* dst) {
    PackBPairs(t, B, ldb, k0, j0, kc, nc, Words(kc), dst);
  }
  static void Micro(int64_t words, const Word* a, const Word* b, float* c, int64_t ldc,
                    int64_t rows, int64_t cols, float alpha, float beta) {
    MicroKernelBf16(words, a, b, c, ldc, rows, cols, alpha, beta);
  }
};

// ---- AMX: C in 16 x 16 fp32 tiles, each tdpbf16ps adding 16 k pairs (words) ----

#define DLRM_AMX __attribute__((target("avx512f,avx512bw,avx512bf16,fma,amx-tile,amx-bf16")))

constexpr int64_t kTileRows = 16;          // rows of a tile; words (64 bytes) in a tile row
constexpr int64_t kAmxMr = 2 * kTileRows;  // rows of C per micro-kernel: two tiles of A
static_assert(kMc % kAmxMr == 0, "an A block must be whole micro-kernel panels");

// A K block's words padded to whole tiles: the pad pairs are zero in A and in B.
int64_t AmxWords(int64_t kc) { return ((kc + 1) / 2 + kTileRows - 1) / kTileRows * kTileRows; }

// Rows r0 .. r0 + 15 of an A block (`rows` of them real), words w0 .. w0 + 15: tile[c] gets
// row c's 16 words (zeros past the rows and past kc).
DLRM_AMX void LoadAWords(bool trans_a, const float* A, int64_t lda, int64_t i, int64_t k,
                         int64_t rows, int64_t kc_left, __m512 (&tile)[16]) {
  if (!trans_a) {  // op(A)(i, k) = A[i * lda + k]: a row's k values are consecutive
    for (int64_t c = 0; c < kTileRows; ++c)
      tile[c] = c < rows ? ConsecutivePairs(A + (i + c) * lda + k, kc_left) : _mm512_setzero_ps();
    return;
  }
  const __mmask16 mask = LaneMask(rows);  // A[k * lda + i]: 16 rows' word w, then transposed
  for (int64_t w = 0; w < kTileRows; ++w) {
    const int64_t kw = 2 * w;
    const __m512 lo =
        kw < kc_left ? _mm512_maskz_loadu_ps(mask, A + (k + kw) * lda + i) : _mm512_setzero_ps();
    const __m512 hi = kw + 1 < kc_left ? _mm512_maskz_loadu_ps(mask, A + (k + kw + 1) * lda + i)
                                       : _mm512_setzero_ps();
    tile[w] = reinterpret_cast<__m512>(InterleavePairs(lo, hi));
  }
  Transpose16x16(tile);
}

// op(A) rows [i0, i0 + mc), k [k0, k0 + kc) row-major in words, as tileloadd reads them:
// row r's word w at dst[r * AmxWords(kc) + w]. Rows up to a whole kAmxMr and words past kc
// are zero.
DLRM_AMX void PackAAmx(bool trans_a, const float* A, int64_t lda, int64_t i0, int64_t k0,
                       int64_t mc, int64_t kc, uint32_t* dst) {
  const int64_t words = AmxWords(kc);
  const int64_t rows_padded = (mc + kAmxMr - 1) / kAmxMr * kAmxMr;
  for (int64_t r0 = 0; r0 < rows_padded; r0 += kTileRows) {
    const int64_t rows = std::clamp<int64_t>(mc - r0, 0, kTileRows);
    for (int64_t w0 = 0; w0 < words; w0 += kTileRows) {
      __m512 tile[16];
      LoadAWords(trans_a, A, lda, i0 + r0, k0 + 2 * w0, rows, kc - 2 * w0, tile);
      for (int64_t c = 0; c < kTileRows; ++c)
        _mm512_store_ps(reinterpret_cast<float*>(dst + (r0 + c) * words + w0), tile[c]);
    }
  }
}

// The sums of A's first 16 rows (tiles 0 and 1: B's two column blocks) and, when
// `both`, of its next 16 (tiles 2 and 3), from zero over `words`, 16 pairs at a time.
template <bool kBoth>
DLRM_AMX void SumTiles(int64_t words, const uint32_t* a, const uint32_t* b) {
  // GCC 12's _tile_loadd is an asm that names no memory: without this barrier the packing's
  // stores could be sunk past the loads (or dropped) were this ever inlined into them.
  __asm__ volatile("" ::: "memory");
  const int64_t a_stride = words * static_cast<int64_t>(sizeof(uint32_t));
  constexpr int64_t kBStride = kNr * sizeof(uint32_t);
  _tile_zero(0);
  _tile_zero(1);
  if (kBoth) {
    _tile_zero(2);
    _tile_zero(3);
  }
  for (int64_t w = 0; w < words; w += kTileRows) {
    _tile_loadd(4, a + w, a_stride);
    _tile_loadd(6, b + w * kNr, kBStride);
    _tile_loadd(7, b + w * kNr + kTileRows, kBStride);
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    if (kBoth) {
      _tile_loadd(5, a + kTileRows * words + w, a_stride);
      _tile_dpbf16ps(2, 5, 6);
      _tile_dpbf16ps(3, 5, 7);
    }
  }
}

// C tile [rows x cols] (at most kAmxMr x kNr) = alpha * (a_panel x b_panel) + beta * C:
// 16 x 16 tiles of sums from zero, 16 k pairs per tdpbf16ps, pairs ascending (the second
// row of tiles only where rows > 16: a row's sums are the same either way). How a
// tdpbf16ps rounds within its 16 pairs is the hardware's: its bits are not vdpbf16ps's.
DLRM_AMX void MicroKernelAmx(int64_t words, const uint32_t* a, const uint32_t* b, float* c,
                             int64_t ldc, int64_t rows, int64_t cols, float alpha, float beta) {
  PrefetchTile(c, ldc, rows, cols);
  constexpr int64_t kCStride = 2 * sizeof(__m512);
  __m512 acc[kAmxMr][2];  // a row of C's 32 columns in two registers, as StoreTile takes
  if (rows > kTileRows) {
    SumTiles<true>(words, a, b);
    _tile_stored(2, &acc[kTileRows][0], kCStride);
    _tile_stored(3, &acc[kTileRows][1], kCStride);
  } else {
    SumTiles<false>(words, a, b);
  }
  _tile_stored(0, &acc[0][0], kCStride);
  _tile_stored(1, &acc[0][1], kCStride);
  StoreTile(acc, c, ldc, rows, cols, alpha, beta);
}

// LDTILECFG's 64-byte operand: palette 1 with all eight tiles 16 rows of 64 bytes. Tiles
// 0-3 hold C, 4-5 A's two row blocks, 6-7 B's two column blocks.
struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {64, 64, 64, 64, 64, 64, 64, 64};
  uint8_t rows[16] = {16, 16, 16, 16, 16, 16, 16, 16};
};
static_assert(sizeof(TileConfig) == 64, "LDTILECFG reads 64 bytes");
// In static storage: GCC 12's _tile_loadconfig tells the compiler it reads 8 bytes, so it
// dropped the stores of a local config's tile shapes (and every tile instruction faulted).
const TileConfig kTileConfig;

// The tiles configured for the calls of one product, and released at the end, so the
// thread's tile state goes back to its initial (unsaved) state.
class TileSession {
 public:
  DLRM_AMX TileSession() { _tile_loadconfig(&kTileConfig); }
  DLRM_AMX ~TileSession() { _tile_release(); }
  TileSession(const TileSession&) = delete;
  TileSession& operator=(const TileSession&) = delete;
};

struct AmxKernel {
  using Word = uint32_t;
  static constexpr int64_t kRows = kAmxMr;
  static constexpr int64_t kKc = kSbgemmKc;
  static int64_t Words(int64_t kc) { return AmxWords(kc); }
  static void PackA(bool t, const float* A, int64_t lda, int64_t i0, int64_t k0, int64_t mc,
                    int64_t kc, Word* dst) {
    PackAAmx(t, A, lda, i0, k0, mc, kc, dst);
  }
  static void PackB(bool t, const float* B, int64_t ldb, int64_t k0, int64_t j0, int64_t kc,
                    int64_t nc, Word* dst) {
    PackBPairs(t, B, ldb, k0, j0, kc, nc, Words(kc), dst);
  }
  static void Micro(int64_t words, const Word* a, const Word* b, float* c, int64_t ldc,
                    int64_t rows, int64_t cols, float alpha, float beta) {
    MicroKernelAmx(words, a, b, c, ldc, rows, cols, alpha, beta);
  }
};

// The fp32 kernel's pieces, for BlockedGemm.
struct Fp32Kernel {
  using Word = float;
  static constexpr int64_t kRows = kMr;            // rows of C per micro-kernel
  static constexpr int64_t kKc = kGemmKc;          // k values per K block
  static int64_t Words(int64_t kc) { return kc; }  // packed words per row of a K block
  static void PackA(bool t, const float* A, int64_t lda, int64_t i0, int64_t k0, int64_t mc,
                    int64_t kc, Word* dst) {
    dlrm::PackA(t, A, lda, i0, k0, mc, kc, dst);
  }
  static void PackB(bool t, const float* B, int64_t ldb, int64_t k0, int64_t j0, int64_t kc,
                    int64_t nc, Word* dst) {
    dlrm::PackB(t, B, ldb, k0, j0, kc, nc, dst);
  }
  static void Micro(int64_t words, const Word* a, const Word* b, float* c, int64_t ldc,
                    int64_t rows, int64_t cols, float alpha, float beta) {
    MicroKernel(words, a, b, c, ldc, rows, cols, alpha, beta);
  }
};

// BLIS's blocks of op(B) for a kernel, in the order every loop here visits them: N blocks
// of kNc columns, within each K blocks of Kernel::kKc. fn(jc, pc, nc, kc, words) gets a
// block's first column and k, its sizes, and its words when packed (k words x nc padded to
// kNr), so a whole packed B is the blocks one after the other.
template <typename Kernel, typename Fn>
void ForEachBBlock(int64_t N, int64_t K, Fn fn) {
  for (int64_t jc = 0; jc < N; jc += kNc) {
    const int64_t nc = std::min(kNc, N - jc);
    const int64_t nc_padded = (nc + kNr - 1) / kNr * kNr;
    for (int64_t pc = 0; pc < K; pc += Kernel::kKc) {
      const int64_t kc = std::min(Kernel::kKc, K - pc);
      fn(jc, pc, nc, kc, Kernel::Words(kc) * nc_padded);
    }
  }
}

template <typename Kernel>
int64_t PackedBWords(int64_t N, int64_t K) {
  int64_t total = 0;
  ForEachBBlock<Kernel>(N, K,
                        [&](int64_t, int64_t, int64_t, int64_t, int64_t words) { total += words; });
  return total;
}

// Every block of op(B) packed, in ForEachBBlock's order, into dst.
template <typename Kernel>
void PackWholeB(bool trans_b, int64_t N, int64_t K, const float* B, int64_t ldb,
                typename Kernel::Word* dst) {
  ForEachBBlock<Kernel>(N, K, [&](int64_t jc, int64_t pc, int64_t nc, int64_t kc, int64_t words) {
    Kernel::PackB(trans_b, B, ldb, pc, jc, kc, nc, dst);
    dst += words;
  });
}

// BLIS's loops around a kernel's packing and micro-kernel: ForEachBBlock's blocks (the
// first K block applies beta, later ones add to C), then M blocks of kMc. packed_b: op(B)
// already packed by PackWholeB (read in the same order), or null to pack each block here.
template <typename Kernel>
void BlockedGemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                 const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
                 int64_t ldc, const typename Kernel::Word* packed_b = nullptr) {
  using Word = typename Kernel::Word;
  thread_local PackBuffer<Word> a_buffer, b_buffer;
  const Word* next_packed = packed_b;
  ForEachBBlock<Kernel>(
      N, K, [&](int64_t jc, int64_t pc, int64_t nc, int64_t kc, int64_t block_words) {
        const int64_t words = Kernel::Words(kc);
        const float block_beta = pc == 0 ? beta : 1.0f;
        const Word* block_b = next_packed;
        if (packed_b != nullptr) {
          next_packed += block_words;
        } else {
          Word* packed = b_buffer.Get(static_cast<size_t>(block_words));
          Kernel::PackB(trans_b, B, ldb, pc, jc, kc, nc, packed);
          block_b = packed;
        }
        for (int64_t ic = 0; ic < M; ic += kMc) {
          const int64_t mc = std::min(kMc, M - ic);
          const int64_t mc_padded = (mc + Kernel::kRows - 1) / Kernel::kRows * Kernel::kRows;
          Word* packed_a = a_buffer.Get(static_cast<size_t>(mc_padded * words));
          Kernel::PackA(trans_a, A, lda, ic, pc, mc, kc, packed_a);
          for (int64_t jr = 0; jr < nc; jr += kNr) {
            for (int64_t ir = 0; ir < mc; ir += Kernel::kRows) {
              Kernel::Micro(words, packed_a + ir * words, block_b + jr * words,
                            C + (ic + ir) * ldc + jc + jr, ldc, std::min(Kernel::kRows, mc - ir),
                            std::min(kNr, nc - jr), alpha, block_beta);
            }
          }
        }
      });
}

}  // namespace

void SgemmAvx512(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                 const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
                 int64_t ldc) {
  BlockedGemm<Fp32Kernel>(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void SbgemmAvx512(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                  const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
                  int64_t ldc) {
  BlockedGemm<Bf16Kernel>(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void SbgemmAmx(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
               const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
               int64_t ldc) {
  const TileSession tiles;
  BlockedGemm<AmxKernel>(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void Sbgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
            const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
            int64_t ldc) {
  (CpuHasAmxBf16() ? SbgemmAmx : SbgemmAvx512)(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb,
                                               beta, C, ldc);
}

int64_t PackedBAvx512Words(bool bf16, int64_t N, int64_t K) {
  if (!bf16) return PackedBWords<Fp32Kernel>(N, K);
  return CpuHasAmxBf16() ? PackedBWords<AmxKernel>(N, K) : PackedBWords<Bf16Kernel>(N, K);
}

void PackBAvx512(bool bf16, bool trans_b, int64_t N, int64_t K, const float* B, int64_t ldb,
                 uint32_t* dst) {
  if (!bf16)
    PackWholeB<Fp32Kernel>(trans_b, N, K, B, ldb, reinterpret_cast<float*>(dst));
  else if (CpuHasAmxBf16())
    PackWholeB<AmxKernel>(trans_b, N, K, B, ldb, dst);
  else
    PackWholeB<Bf16Kernel>(trans_b, N, K, B, ldb, dst);
}

void GemmAvx512PackedB(bool bf16, bool trans_a, int64_t M, int64_t N, int64_t K, float alpha,
                       const float* A, int64_t lda, const uint32_t* packed_b, float beta, float* C,
                       int64_t ldc) {
  if (!bf16) {
    BlockedGemm<Fp32Kernel>(trans_a, false, M, N, K, alpha, A, lda, nullptr, 0, beta, C, ldc,
                            reinterpret_cast<const float*>(packed_b));
  } else if (CpuHasAmxBf16()) {
    const TileSession tiles;
    BlockedGemm<AmxKernel>(trans_a, false, M, N, K, alpha, A, lda, nullptr, 0, beta, C, ldc,
                           packed_b);
  } else {
    BlockedGemm<Bf16Kernel>(trans_a, false, M, N, K, alpha, A, lda, nullptr, 0, beta, C, ldc,
                            packed_b);
  }
}

}  // namespace dlrm

#else  // not x86-64: CpuHasAvx512() is false, so this is never called.

#include "engine/core/status.h"

namespace dlrm {
void SgemmAvx512(bool, bool, int64_t, int64_t, int64_t, float, const float*, int64_t, const float*,
                 int64_t, float, float*, int64_t) {
  DLRM_INTERNAL_CHECK(false && "SgemmAvx512 on a CPU without AVX-512");
}
void SbgemmAvx512(bool, bool, int64_t, int64_t, int64_t, float, const float*, int64_t, const float*,
                  int64_t, float, float*, int64_t) {
  DLRM_INTERNAL_CHECK(false && "SbgemmAvx512 on a CPU without AVX512-BF16");
}
void SbgemmAmx(bool, bool, int64_t, int64_t, int64_t, float, const float*, int64_t, const float*,
               int64_t, float, float*, int64_t) {
  DLRM_INTERNAL_CHECK(false && "SbgemmAmx on a CPU without AMX");
}
void Sbgemm(bool, bool, int64_t, int64_t, int64_t, float, const float*, int64_t, const float*,
            int64_t, float, float*, int64_t) {
  DLRM_INTERNAL_CHECK(false && "Sbgemm on a CPU without AVX512-BF16");
}
int64_t PackedBAvx512Words(bool, int64_t, int64_t) { return 0; }
void PackBAvx512(bool, bool, int64_t, int64_t, const float*, int64_t, uint32_t*) {
  DLRM_INTERNAL_CHECK(false && "PackBAvx512 on a CPU without AVX-512");
}
void GemmAvx512PackedB(bool, bool, int64_t, int64_t, int64_t, float, const float*, int64_t,
                       const uint32_t*, float, float*, int64_t) {
  DLRM_INTERNAL_CHECK(false && "GemmAvx512PackedB on a CPU without AVX-512");
}
}  // namespace dlrm

#endif

#include "engine/dense/dot_interaction_avx2.h"

#if defined(__x86_64__)
#include <immintrin.h>

#include <algorithm>

#define DLRM_AVX2 __attribute__((target("avx2,fma")))

namespace dlrm {
namespace {

// Lanes [s0 .. s7] of the horizontal sums of a0..a7.
DLRM_AVX2 inline __m256 HorizontalSums8(__m256 a0, __m256 a1, __m256 a2, __m256 a3, __m256 a4,
                                        __m256 a5, __m256 a6, __m256 a7) {
  const __m256 t0 = _mm256_hadd_ps(a0, a1), t1 = _mm256_hadd_ps(a2, a3);
  const __m256 t2 = _mm256_hadd_ps(a4, a5), t3 = _mm256_hadd_ps(a6, a7);
  const __m256 u0 = _mm256_hadd_ps(t0, t1), u1 = _mm256_hadd_ps(t2, t3);
  // u0 = [s0 s1 s2 s3 | s0' s1' s2' s3'] (low / high 128-bit halves), u1 likewise for 4..7.
  return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}

DLRM_AVX2 inline const float* Z(const float* x, const float* pooled, int d, int i) {
  return i == 0 ? x : pooled + static_cast<long>(i - 1) * d;
}

}  // namespace

DLRM_AVX2 void DotInteractionForwardAvx2(const float* x, const float* pooled, int num_features,
                                         int d, bool self, float* out) {
  const int diagonal = self ? 1 : 0;
  for (int i = 1 - diagonal; i <= num_features; ++i) {
    const float* zi = Z(x, pooled, d, i);
    const int row = i + diagonal;  // pairs (i, 0..row-1)
    // Eight pairs (i, j..j+7) at a time; a short last group reuses z_0 in its spare lanes
    // and stores only the lanes it owns.
    for (int j = 0; j < row; j += 8) {
      const int count = std::min(8, row - j);
      const float* zj[8];
      for (int l = 0; l < 8; ++l) zj[l] = Z(x, pooled, d, l < count ? j + l : 0);
      __m256 acc[8];
      for (int l = 0; l < 8; ++l) acc[l] = _mm256_setzero_ps();
      for (int k = 0; k < d; k += 8) {
        const __m256 a = _mm256_loadu_ps(zi + k);
        for (int l = 0; l < 8; ++l) acc[l] = _mm256_fmadd_ps(a, _mm256_loadu_ps(zj[l] + k), acc[l]);
      }
      const __m256 sums =
          HorizontalSums8(acc[0], acc[1], acc[2], acc[3], acc[4], acc[5], acc[6], acc[7]);
      if (count == 8) {
        _mm256_storeu_ps(out, sums);
      } else {
        alignas(32) float lanes[8];
        _mm256_store_ps(lanes, sums);
        std::copy(lanes, lanes + count, out);
      }
      out += count;
    }
  }
}

DLRM_AVX2 void DotInteractionBackwardAvx2(const float* x, const float* pooled, const float* g,
                                          int num_features, int d, bool self, float* dx,
                                          float* dpooled, float* scratch) {
  // The symmetric coefficient matrix M: dz_i = sum_j M[i][j] z_j; its diagonal is zero, or
  // 2 g_(i,i) with self (g's row i ends with (i, i)).
  const int n = num_features + 1;
  float* m = scratch;
  for (int i = 0; i < n; ++i) {
    m[i * n + i] = 0.0f;
    for (int j = 0; j < i; ++j) m[i * n + j] = m[j * n + i] = *g++;
    if (self) {
      const float gii = *g++;
      m[i * n + i] = gii + gii;
    }
  }
  for (int i = 0; i < n; ++i) {
    const float* mi = m + i * n;
    float* dz = i == 0 ? dx : dpooled + static_cast<long>(i - 1) * d;
    for (int k = 0; k < d; k += 8) {
      // Two accumulators (even and odd j) halve the FMA dependency chain.
      __m256 even = _mm256_setzero_ps(), odd = _mm256_setzero_ps();
      int j = 0;
      for (; j + 1 < n; j += 2) {
        even = _mm256_fmadd_ps(_mm256_broadcast_ss(mi + j), _mm256_loadu_ps(Z(x, pooled, d, j) + k),
                               even);
        odd = _mm256_fmadd_ps(_mm256_broadcast_ss(mi + j + 1),
                              _mm256_loadu_ps(Z(x, pooled, d, j + 1) + k), odd);
      }
      if (j < n) {
        even = _mm256_fmadd_ps(_mm256_broadcast_ss(mi + j), _mm256_loadu_ps(Z(x, pooled, d, j) + k),
                               even);
      }
      __m256 sum = _mm256_add_ps(even, odd);
      if (i == 0) sum = _mm256_add_ps(_mm256_loadu_ps(dz + k), sum);
      _mm256_storeu_ps(dz + k, sum);
    }
  }
}

}  // namespace dlrm

#else  // not x86-64: never called (CpuHasAvx2Fma() is false), defined so the code links.

namespace dlrm {
void DotInteractionForwardAvx2(const float*, const float*, int, int, bool, float*) {}
void DotInteractionBackwardAvx2(const float*, const float*, const float*, int, int, bool, float*,
                                float*, float*) {}
}  // namespace dlrm

#endif

#include "engine/embedding/pool_bag_avx2.h"

#if defined(__x86_64__)
#include <immintrin.h>

#include "engine/core/prefetch.h"
#include "engine/embedding/column_blocks.h"

// AVX2 without FMA: a fused multiply-add would round a weighted row differently from the
// portable loop.
#define DLRM_AVX2_NO_FMA __attribute__((target("avx2")))

namespace dlrm {
namespace {

// Columns [col, col + V * 8) of the bag; prefetches only when asked (the first block).
template <int V>
DLRM_AVX2_NO_FMA void PoolBlock(const void* const* rows, int64_t count, const float* weights,
                                bool mean, int32_t dim, int32_t col, float* out, int64_t available,
                                int64_t distance, bool prefetch) {
  __m256 acc[V];
  for (int v = 0; v < V; ++v) acc[v] = _mm256_setzero_ps();
  for (int64_t j = 0; j < count; ++j) {
    if (prefetch && j + distance < available)
      PrefetchLines(rows[j + distance], sizeof(float) * static_cast<size_t>(dim));
    const float* row = static_cast<const float*>(rows[j]) + col;
    if (weights) {
      const __m256 w = _mm256_set1_ps(weights[j]);
      for (int v = 0; v < V; ++v)
        acc[v] = _mm256_add_ps(acc[v], _mm256_mul_ps(w, _mm256_loadu_ps(row + v * kLanes)));
    } else {
      for (int v = 0; v < V; ++v) acc[v] = _mm256_add_ps(acc[v], _mm256_loadu_ps(row + v * kLanes));
    }
  }
  StoreBlock(acc, mean, count, out, col);
}

}  // namespace

void PoolBagAvx2(const void* const* rows, int64_t count, const float* weights, bool mean,
                 int32_t dim, float* out, int64_t available, int64_t prefetch_distance) {
  ForEachColumnBlock(dim, [&](auto vectors, int32_t col, bool first) {
    PoolBlock<decltype(vectors)::value>(rows, count, weights, mean, dim, col, out, available,
                                        prefetch_distance, first);
  });
}

}  // namespace dlrm

#else

#include "engine/core/status.h"

namespace dlrm {

void PoolBagAvx2(const void* const*, int64_t, const float*, bool, int32_t, float*, int64_t,
                 int64_t) {
  DLRM_INTERNAL_CHECK(false && "PoolBagAvx2 on a CPU without AVX2");
}

}  // namespace dlrm

#endif

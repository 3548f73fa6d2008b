// The column blocking the AVX2 pooling kernels share (pool_bag_avx2.cc, quantized_row.cc,
// half_row.cc): a bag's first dim - dim % 8 columns in blocks of up to 8 vectors of 8
// floats (64 columns, 8 accumulators: half the registers), each block a kernel
// instantiated for its vector count so that its accumulators stay in registers, and the
// block's common end (StoreBlock).
// Threading and errors: none; a pure dispatch.
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace dlrm {

inline constexpr int32_t kLanes = 8;         // floats in one AVX2 vector
inline constexpr int32_t kBlockVectors = 8;  // vectors in one block: 64 columns

// Calls block(std::integral_constant<int, V>{}, col, first) for each block: V vectors
// from column col (first: the block at column 0, the one that prefetches). Returns the
// columns covered, dim - dim % 8; the caller finishes the rest.
template <typename Block>
int32_t ForEachColumnBlock(int32_t dim, Block block) {
  const int32_t vectors = dim / kLanes;
  for (int32_t v0 = 0; v0 < vectors; v0 += kBlockVectors) {
    const int32_t col = v0 * kLanes;
    const bool first = v0 == 0;
    switch (std::min(vectors - v0, kBlockVectors)) {
      case 1: block(std::integral_constant<int, 1>{}, col, first); break;
      case 2: block(std::integral_constant<int, 2>{}, col, first); break;
      case 3: block(std::integral_constant<int, 3>{}, col, first); break;
      case 4: block(std::integral_constant<int, 4>{}, col, first); break;
      case 5: block(std::integral_constant<int, 5>{}, col, first); break;
      case 6: block(std::integral_constant<int, 6>{}, col, first); break;
      case 7: block(std::integral_constant<int, 7>{}, col, first); break;
      default: block(std::integral_constant<int, 8>{}, col, first); break;
    }
  }
  return vectors * kLanes;
}

#if defined(__x86_64__)
// A block's end: its V sums divided by count for MEAN (a bag with values), stored at
// out[col, col + V * 8).
template <int V>
__attribute__((target("avx2"))) inline void StoreBlock(__m256 (&acc)[V], bool mean, int64_t count,
                                                       float* out, int32_t col) {
  if (mean && count > 0) {
    const __m256 len = _mm256_set1_ps(static_cast<float>(count));
    for (int v = 0; v < V; ++v) acc[v] = _mm256_div_ps(acc[v], len);
  }
  for (int v = 0; v < V; ++v) _mm256_storeu_ps(out + col + v * kLanes, acc[v]);
}
#endif

}  // namespace dlrm

// Fixed-order summation: the association of a sum never depends on the thread count.
//
// A batch is cut into chunks of a fixed number of rows (the config's reduction_chunk_rows);
// each chunk produces its partial sums, and partials are combined in the binary tree
// below, whose shape depends only on the number of chunks.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "engine/core/thread_pool.h"

namespace dlrm {

// partials[c] points at `count` values for chunk c; on return partials[0] holds
// ((p0+p1)+(p2+p3))+... in the tree order. Elements are independent, so the element
// range is split across the pool without changing any result.
template <typename T>
void TreeReduceInto(const std::vector<T*>& partials, size_t count, ThreadPool* pool) {
  const size_t k = partials.size();
  if (k <= 1 || count == 0) return;
  // The whole tree over one block of elements at a time, so the partials it adds into are
  // still in L1 at the next level: each partial is read from memory once, not once a level
  // (with the dense gradients of a large model, megabytes per chunk, that was a third of
  // the reduction's traffic). The order of every element's additions is the tree's.
  constexpr size_t kBlock = 2048;
  auto reduce_range = [&](size_t begin, size_t end) {
    for (size_t b0 = begin; b0 < end; b0 += kBlock) {
      const size_t b1 = std::min(end, b0 + kBlock);
      for (size_t stride = 1; stride < k; stride *= 2) {
        for (size_t i = 0; i + stride < k; i += 2 * stride) {
          T* dst = partials[i];
          const T* src = partials[i + stride];
          for (size_t e = b0; e < b1; ++e) dst[e] += src[e];
        }
      }
    }
  };
  const int64_t parts =
      pool ? std::min<int64_t>(pool->num_threads() * 4, static_cast<int64_t>((count + 4095) / 4096))
           : 1;
  if (pool == nullptr || parts <= 1) {
    reduce_range(0, count);
    return;
  }
  pool->ParallelFor(parts, [&](int64_t p) {
    reduce_range(SplitBegin(count, parts, p), SplitBegin(count, parts, p + 1));
  });
}

// Sum of values[0..n) by the same fixed tree over blocks of `block` values.
template <typename T>
double TreeSum(const T* values, size_t n, size_t block = 64) {
  std::vector<double> partial((n + block - 1) / block, 0.0);
  for (size_t b = 0; b < partial.size(); ++b) {
    double s = 0;
    for (size_t i = b * block; i < std::min(n, (b + 1) * block); ++i) s += values[i];
    partial[b] = s;
  }
  std::vector<double*> ptrs;
  for (auto& p : partial) ptrs.push_back(&p);
  TreeReduceInto(ptrs, 1, nullptr);
  return partial.empty() ? 0.0 : partial[0];
}

}  // namespace dlrm

// CopyInParallel: a large memcpy cut into slices that a thread pool copies at once. One
// core copies a few GB/s from memory that is not in cache (a batch's 17 MB of ids); the
// pool's cores together copy several times that.
//
// Memory: borrows both arrays, which must not overlap. Threading: as ThreadPool::ParallelFor
// (the pool may be null: one thread). Errors: none.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "engine/core/thread_pool.h"

namespace dlrm {

// Bytes one thread copies at least: below that a split costs more than it gains.
inline constexpr size_t kCopySliceBytes = size_t{256} << 10;

// to[0 .. count) = from[0 .. count), in up to one slice per pool thread.
template <typename T>
void CopyInParallel(ThreadPool* pool, const T* from, size_t count, T* to) {
  if (count == 0) return;
  const size_t bytes = count * sizeof(T);
  const size_t threads = pool != nullptr ? static_cast<size_t>(pool->num_threads()) : 1;
  const auto parts =
      static_cast<int64_t>(std::max<size_t>(1, std::min(threads, bytes / kCopySliceBytes)));
  ParallelForRanges(pool, static_cast<int64_t>(count), parts, [&](int64_t begin, int64_t end) {
    std::memcpy(to + begin, from + begin, static_cast<size_t>(end - begin) * sizeof(T));
  });
}

}  // namespace dlrm

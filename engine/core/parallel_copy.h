// CopyInParallel: a large memcpy (or converting copy) cut into slices that a thread pool
// copies at once. One core copies a few GB/s from memory that is not in cache (a batch's
// 17 MB of ids); the pool's cores together copy several times that.
//
// Memory: borrows both arrays, which must not overlap. Threading: as ThreadPool::ParallelFor
// (the pool may be null: one thread). Errors: none.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "engine/core/thread_pool.h"

namespace dlrm {

// Bytes one thread copies at least: below that a split costs more than it gains.
inline constexpr size_t kCopySliceBytes = size_t{256} << 10;

// to[0 .. count) = from[0 .. count), in up to one slice per pool thread: a memcpy, or,
// where the types differ, each value converted by static_cast (ids narrowed to 32 bits once
// validation has bounded them).
template <typename From, typename To>
void CopyInParallel(ThreadPool* pool, const From* from, size_t count, To* to) {
  if (count == 0) return;
  const size_t bytes = count * std::max(sizeof(From), sizeof(To));
  const size_t threads = pool != nullptr ? static_cast<size_t>(pool->num_threads()) : 1;
  const auto parts =
      static_cast<int64_t>(std::max<size_t>(1, std::min(threads, bytes / kCopySliceBytes)));
  ParallelForRanges(pool, static_cast<int64_t>(count), parts, [&](int64_t begin, int64_t end) {
    if constexpr (std::is_same_v<From, To>) {
      std::memcpy(to + begin, from + begin, static_cast<size_t>(end - begin) * sizeof(To));
    } else {
      for (int64_t i = begin; i < end; ++i) to[i] = static_cast<To>(from[i]);
    }
  });
}

}  // namespace dlrm

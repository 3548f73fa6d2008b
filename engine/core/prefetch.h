// Software prefetch of a whole row. Embedding rows and their optimizer state sit at random
// addresses of tables far larger than the caches; asking for a row a few rows before it
// is used keeps several misses in flight instead of one.
#pragma once

#include <cstddef>

namespace dlrm {

inline constexpr size_t kCacheLineBytes = 64;

// Every cache line of [p, p + bytes): a row wider than one line (dim 64 floats is four)
// would otherwise miss on all but its first line.
inline void PrefetchLines(const void* p, size_t bytes) {
  const char* c = static_cast<const char*>(p);
  for (size_t off = 0; off < bytes; off += kCacheLineBytes) __builtin_prefetch(c + off);
}

}  // namespace dlrm

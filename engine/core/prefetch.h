// Software prefetch of a whole row. Embedding rows and their optimizer state sit at random
// addresses of tables far larger than the caches; asking for a row a few rows before it
// is used keeps several misses in flight instead of one.
#pragma once

#include <cstddef>

namespace dlrm {

inline constexpr size_t kCacheLineBytes = 64;

// Every cache line [p, p + bytes) touches, bytes > 0: a row wider than one line (dim 64
// floats is four) would otherwise miss on all but its first line, and a row that starts
// inside a line (a quantized row of dim + 8 bytes) reaches one line past its size, which
// the last byte's prefetch asks for. Written this way on purpose: GCC 12 at -O2 deletes
// the whole function when the loop starts from p rounded down to its line or when the
// last prefetch is guarded (checked in the kernels' disassembly, docs/DESIGN.md).
inline void PrefetchLines(const void* p, size_t bytes) {
  const char* c = static_cast<const char*>(p);
  for (size_t off = 0; off < bytes; off += kCacheLineBytes) __builtin_prefetch(c + off);
  __builtin_prefetch(c + bytes - 1);
}

}  // namespace dlrm

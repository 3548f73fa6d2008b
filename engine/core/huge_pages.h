// Asks the kernel to back a large, not yet touched allocation with 2 MiB pages
// (transparent huge pages, madvise mode). Embedding lookups read rows at random addresses
// across gigabytes: with 4 KiB pages nearly every one also misses the TLB (a nested page
// walk in a VM), with 2 MiB pages the hot part of the table stays mapped. Measured on the
// random-gather probe: +40% rows/s (bench/README.md).
//
// Advice only: where THP is off or the kernel declines, nothing changes but speed.
#pragma once

#include <cstddef>
#include <cstdint>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace dlrm {

// Below this, a table fits in few pages anyway.
inline constexpr size_t kHugePageAdviceMinBytes = size_t{4} << 20;

inline void AdviseHugePages(void* data, size_t bytes) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  if (data == nullptr || bytes < kHugePageAdviceMinBytes) return;
  constexpr uintptr_t kPage = 4096;
  const auto begin = (reinterpret_cast<uintptr_t>(data) + kPage - 1) & ~(kPage - 1);
  const auto end = (reinterpret_cast<uintptr_t>(data) + bytes) & ~(kPage - 1);
  if (end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
#else
  (void)data;
  (void)bytes;
#endif
}

}  // namespace dlrm

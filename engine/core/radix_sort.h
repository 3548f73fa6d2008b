// Stable LSD radix sort by an unsigned 64-bit key, 8 bits a pass: the sort of the
// embedding backward's (id, position) touches and of a step's ids in DynamicRows.
//
// The histograms of every pass are counted in one sweep first, and a pass whose digit
// every key shares is skipped, so ids of a table of R rows cost ceil(log2(R) / 8) passes
// (3 for a million rows), whatever their width. Stable: equal keys keep their order.
// Threading: a pure function of its arguments. Errors: none (n >= 0 is the caller's).
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <utility>

namespace dlrm {

// The key of a signed id that sorts as the id does (the sign bit flipped).
inline uint64_t SignedKey(int64_t id) { return static_cast<uint64_t>(id) ^ (uint64_t{1} << 63); }

// Sorts data[0, n) by key(data[i]), of which only the low key_bits bits may be set;
// scratch holds n elements.
template <typename T, typename Key>
void RadixSort(T* data, T* scratch, int64_t n, int key_bits, Key key) {
  constexpr int kDigitBits = 8;
  constexpr size_t kBuckets = size_t{1} << kDigitBits;
  constexpr int kMaxPasses = 64 / kDigitBits;
  const int passes = std::min(kMaxPasses, (key_bits + kDigitBits - 1) / kDigitBits);
  std::array<std::array<int64_t, kBuckets>, kMaxPasses> count{};
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t k = key(data[i]);
    for (int p = 0; p < passes; ++p) ++count[p][(k >> (kDigitBits * p)) & (kBuckets - 1)];
  }
  T* src = data;
  T* dst = scratch;
  for (int p = 0; p < passes; ++p) {
    std::array<int64_t, kBuckets>& start = count[p];
    if (std::find(start.begin(), start.end(), n) != start.end()) continue;  // one digit
    int64_t sum = 0;
    for (int64_t& c : start) sum += std::exchange(c, sum);
    for (int64_t i = 0; i < n; ++i)
      dst[start[(key(src[i]) >> (kDigitBits * p)) & (kBuckets - 1)]++] = src[i];
    std::swap(src, dst);
  }
  if (src != data) std::copy(src, src + n, data);
}

}  // namespace dlrm

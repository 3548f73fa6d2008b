// The id -> row map of a dynamic embedding table (issue 14): any int64 id gets a row of its
// own while it is resident (collisionless), and at most `capacity` ids are resident.
//
// Layout: open addressing over groups of 16 slots, each with a one-byte tag (7 bits of the
// id's hash, or empty / deleted), so that one SIMD compare tests a whole group (the
// Swiss-table layout of absl::flat_hash_map; HierarchicalKV's buckets are the same idea on
// a GPU). Groups are probed triangularly from the hash's group; a lookup ends at the first
// group with an empty slot. The slot array is sized once, for `capacity` at a load of at
// most 13/16, so there is no growth and no per-id allocation; erased slots become deleted
// tags, and when fewer than 1/8 of the slots are left empty, the array is rebuilt in place
// of itself (same size, deleted tags dropped): at most once per 1/16 of the slots inserted.
//
// Rows are [0, capacity). Insert hands out the row most recently freed (a stack), or else
// the lowest row never used, and the hash has no seed: the same sequence of inserts and
// erases gives the same rows in every process, which the table's determinism rests on.
//
// Threading: Find, FindBatch and the accessors are const and may run concurrently with
// each other; Insert, Erase and Clear need exclusive access.
// Errors: kInvalidArgument for a capacity outside [1, kMaxCapacity]; kResourceExhausted
// from Insert of a new id when every row is taken (nothing changes: the caller evicts).
#pragma once

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include <cstddef>
#include <cstdint>
#include <vector>

namespace dlrm {

// The lookup path, inline: a lookup costs a cache miss or two (~20 ns), and a call into
// another unit, which ends the CPU's run-ahead into the next lookup, costs a third more.
namespace id_index_detail {

inline constexpr int8_t kEmpty = -128;  // 0b10000000
inline constexpr int8_t kDeleted = -2;  // 0b11111110; a resident id's tag is 0..127
inline constexpr size_t kGroup = 16;

// One 64 x 64 -> 128-bit multiply by an odd constant, folded (absl's mix): the low half
// carries each id bit upward and the high half downward, so sequential ids and ids that
// differ only in high bits (hashed features) spread alike; short, so that the CPU runs
// ahead into the next lookups.
inline uint64_t Mix(int64_t id) {
  const unsigned __int128 product =
      static_cast<unsigned __int128>(static_cast<uint64_t>(id)) * 0x9E3779B97F4A7C15ULL;
  return static_cast<uint64_t>(product) ^ static_cast<uint64_t>(product >> 64);
}

inline int8_t TagOf(uint64_t hash) { return static_cast<int8_t>(hash & 0x7f); }

// Bit i set: tags[i] == tag / tags[i] is empty or deleted (its high bit).
#if defined(__SSE2__)
inline uint32_t MatchTag(const int8_t* tags, int8_t tag) {
  const __m128i group = _mm_loadu_si128(reinterpret_cast<const __m128i*>(tags));
  return static_cast<uint32_t>(_mm_movemask_epi8(_mm_cmpeq_epi8(group, _mm_set1_epi8(tag))));
}
inline uint32_t MatchFree(const int8_t* tags) {
  return static_cast<uint32_t>(
      _mm_movemask_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(tags))));
}
#else
inline uint32_t MatchTag(const int8_t* tags, int8_t tag) {
  uint32_t bits = 0;
  for (size_t i = 0; i < kGroup; ++i) bits |= static_cast<uint32_t>(tags[i] == tag) << i;
  return bits;
}
inline uint32_t MatchFree(const int8_t* tags) {
  uint32_t bits = 0;
  for (size_t i = 0; i < kGroup; ++i) bits |= static_cast<uint32_t>(tags[i] < 0) << i;
  return bits;
}
#endif

inline uint32_t MatchEmpty(const int8_t* tags) { return MatchTag(tags, kEmpty); }

inline size_t Lowest(uint32_t bits) { return static_cast<size_t>(__builtin_ctz(bits)); }

}  // namespace id_index_detail

class IdIndex {
 public:
  static constexpr int64_t kMaxCapacity = int64_t{1} << 40;
  static constexpr int64_t kNotFound = -1;

  explicit IdIndex(int64_t capacity);

  int64_t capacity() const { return capacity_; }
  int64_t size() const { return size_; }
  // Bytes held: tags, slots and the free-row stack.
  size_t memory_bytes() const;
  // What an index of `capacity` takes once it is full (before it is made).
  static size_t MemoryBytesFor(int64_t capacity);

  // The id's row, or kNotFound.
  int64_t Find(int64_t id) const {
    namespace d = id_index_detail;
    const uint64_t hash = d::Mix(id);
    const int8_t tag = d::TagOf(hash);
    size_t group = (hash >> 7) & group_mask_;
    // Triangular steps over a power-of-two number of groups visit each group once.
    for (size_t step = 1; step <= group_mask_ + 1; ++step) {
      const size_t base = group * d::kGroup;
      const int8_t* tags = tags_.data() + base;
      for (uint32_t m = d::MatchTag(tags, tag); m != 0; m &= m - 1) {
        const Slot& slot = slots_[base + d::Lowest(m)];
        if (slot.id == id) return slot.row;
      }
      if (d::MatchEmpty(tags) != 0) return kNotFound;  // no probe went past it
      group = (group + step) & group_mask_;
    }
    return kNotFound;
  }
  // rows[i] = Find(ids[i]) for a batch's lookups, pipelined: the tags of the id 16 ahead
  // are prefetched, and for the id 8 ahead (its tags cached by then) the slot its tag
  // matches, so each lookup finds both of its lines in cache.
  void FindBatch(const int64_t* ids, int64_t n, int64_t* rows) const {
    namespace d = id_index_detail;
    constexpr int64_t kAhead = 8;
    for (int64_t i = 0; i < n; ++i) {
      if (i + 2 * kAhead < n)
        __builtin_prefetch(tags_.data() +
                           ((d::Mix(ids[i + 2 * kAhead]) >> 7) & group_mask_) * d::kGroup);
      if (i + kAhead < n) {
        const uint64_t hash = d::Mix(ids[i + kAhead]);
        const size_t base = ((hash >> 7) & group_mask_) * d::kGroup;
        const uint32_t m = d::MatchTag(tags_.data() + base, d::TagOf(hash));
        if (m != 0) __builtin_prefetch(slots_.data() + base + d::Lowest(m));
      }
      rows[i] = Find(ids[i]);
    }
  }
  // The id's row: the one it has, or a free row it gets now (*inserted says which).
  int64_t Insert(int64_t id, bool* inserted = nullptr);
  // Frees the id's row; false if the id was not resident.
  bool Erase(int64_t id);
  // Erases every id; rows are handed out from 0 again.
  void Clear();
  // Undoes the last Insert of `id`, which got `row` from the never-used rows
  // (from_unused) or from the top of the freed stack: the row goes back where it came
  // from. Undoes the last Erase of `id`, which freed `row` (the freed stack's top): the id
  // holds it again. Undone in the reverse order of the operations, these restore the ids'
  // rows and the free-row state exactly (the slot layout may differ: it decides no row).
  void UndoInsert(int64_t id, int64_t row, bool from_unused);
  void UndoErase(int64_t id, int64_t row);

  // The free-row state, for checkpoints: the freed rows (a stack, bottom first) and the
  // first row never handed out.
  const std::vector<int64_t>& freed_rows() const { return freed_rows_; }
  int64_t next_unused_row() const { return next_unused_row_; }
  // Replaces the contents with resident ids[i] -> rows[i] and that free-row state, so
  // that later inserts get the rows they would have got. Checks everything first:
  // kDataLoss naming the first inconsistency (sizes, an id twice, a row outside
  // [0, next_unused_row) or given twice, rows neither resident nor freed); unchanged then.
  void Restore(const std::vector<int64_t>& ids, const std::vector<int64_t>& rows,
               const std::vector<int64_t>& freed_rows, int64_t next_unused_row);

  // fn(id, row) for every resident id, in slot order (a function of the history).
  template <typename Fn>
  void ForEach(Fn fn) const {
    for (size_t s = 0; s < tags_.size(); ++s)
      if (tags_[s] >= 0) fn(slots_[s].id, slots_[s].row);
  }

 private:
  struct Slot {
    int64_t id;
    int64_t row;
  };
  // Where the id is (its slot), or where it would go (*slot: the first free slot on its
  // probe path); returns whether it was found.
  bool Locate(int64_t id, uint64_t hash, size_t* slot) const;
  // Rebuilds the slot array at the same size without deleted tags.
  void DropDeleted();
  void PlaceNew(size_t slot, int8_t tag, int64_t id, int64_t row);

  int64_t capacity_ = 0;
  int64_t size_ = 0;
  size_t group_mask_ = 0;    // groups - 1 (a power of two)
  int64_t growth_left_ = 0;  // empty slots that may still be filled before a rebuild
  std::vector<int8_t> tags_;
  std::vector<Slot> slots_;
  int64_t next_unused_row_ = 0;  // rows [next_unused_row_, capacity) were never handed out
  std::vector<int64_t> freed_rows_;
};

}  // namespace dlrm

#include "engine/embedding/id_index.h"

#include <algorithm>
#include <utility>

#include "engine/core/status.h"

namespace dlrm {
namespace {

using id_index_detail::kDeleted;
using id_index_detail::kEmpty;
using id_index_detail::kGroup;
using id_index_detail::Lowest;
using id_index_detail::MatchEmpty;
using id_index_detail::MatchFree;
using id_index_detail::MatchTag;
using id_index_detail::Mix;
using id_index_detail::TagOf;

// Groups for `capacity` ids at a load of at most 7/8: a power of two.
// At most 13/16 of the slots hold ids, and a rebuild comes when fewer than 1/8 are empty:
// a full table churned (every insert after an erase) rebuilds at most once per 1/16 of
// its slots. (Sized for 7/8, a full table rebuilt at nearly every insert: measured, the
// index took a quarter of an SSD-tier step.)
size_t GroupsFor(int64_t capacity) {
  const auto slots = static_cast<size_t>((capacity * 16 + 12) / 13);
  size_t groups = 1;
  while (groups * kGroup < slots) groups *= 2;
  return groups;
}

}  // namespace

IdIndex::IdIndex(int64_t capacity) : capacity_(capacity) {
  if (capacity < 1 || capacity > kMaxCapacity)
    ThrowInvalid("dynamic table capacity must be in [1, 2^40], got ", capacity);
  const size_t groups = GroupsFor(capacity);
  group_mask_ = groups - 1;
  tags_.assign(groups * kGroup, kEmpty);
  slots_.resize(groups * kGroup);
  // Every row may be freed at once; reserved up front, so an erase never allocates and
  // memory_bytes() depends on the capacity alone.
  freed_rows_.reserve(static_cast<size_t>(capacity));
  Clear();
}

size_t IdIndex::MemoryBytesFor(int64_t capacity) {
  const size_t slots = GroupsFor(capacity) * kGroup;
  return slots * (1 + sizeof(Slot)) + static_cast<size_t>(capacity) * sizeof(int64_t);
}

size_t IdIndex::memory_bytes() const {
  return tags_.capacity() + slots_.capacity() * sizeof(Slot) +
         freed_rows_.capacity() * sizeof(int64_t);
}

void IdIndex::Clear() {
  std::fill(tags_.begin(), tags_.end(), kEmpty);
  size_ = 0;
  growth_left_ = static_cast<int64_t>(tags_.size() - tags_.size() / 8);
  next_unused_row_ = 0;
  freed_rows_.clear();
}

bool IdIndex::Locate(int64_t id, uint64_t hash, size_t* slot) const {
  const int8_t tag = TagOf(hash);
  size_t group = (hash >> 7) & group_mask_;
  bool have_free = false;
  // Triangular steps over a power-of-two number of groups visit each group once.
  for (size_t step = 1; step <= group_mask_ + 1; ++step) {
    const size_t base = group * kGroup;
    const int8_t* tags = tags_.data() + base;
    for (uint32_t m = MatchTag(tags, tag); m != 0; m &= m - 1) {
      if (slots_[base + Lowest(m)].id == id) {
        *slot = base + Lowest(m);
        return true;
      }
    }
    const uint32_t free = MatchFree(tags);
    if (!have_free && free != 0) {
      *slot = base + Lowest(free);
      have_free = true;
    }
    if (MatchEmpty(tags) != 0) return false;  // no probe went past this group
    group = (group + step) & group_mask_;
  }
  return false;
}

int64_t IdIndex::Insert(int64_t id, bool* inserted) {
  const uint64_t hash = Mix(id);
  size_t slot = 0;
  const bool found = Locate(id, hash, &slot);
  if (inserted != nullptr) *inserted = !found;
  if (found) return slots_[slot].row;
  if (size_ == capacity_)
    Throw(StatusCode::kResourceExhausted, "dynamic table is full: all ", capacity_,
          " rows are taken and id ", id, " needs one (evict first)");
  if (tags_[slot] == kEmpty && growth_left_ == 0) {
    DropDeleted();
    Locate(id, hash, &slot);
  }
  int64_t row = next_unused_row_;
  if (freed_rows_.empty()) {
    ++next_unused_row_;
  } else {
    row = freed_rows_.back();
    freed_rows_.pop_back();
  }
  PlaceNew(slot, TagOf(hash), id, row);
  return row;
}

void IdIndex::PlaceNew(size_t slot, int8_t tag, int64_t id, int64_t row) {
  if (tags_[slot] == kEmpty) --growth_left_;
  tags_[slot] = tag;
  slots_[slot] = {id, row};
  ++size_;
}

bool IdIndex::Erase(int64_t id) {
  size_t slot = 0;
  if (!Locate(id, Mix(id), &slot)) return false;
  freed_rows_.push_back(slots_[slot].row);
  // An empty slot in the group means no probe went past it: this one may be empty too.
  if (MatchEmpty(tags_.data() + slot / kGroup * kGroup) != 0) {
    tags_[slot] = kEmpty;
    ++growth_left_;
  } else {
    tags_[slot] = kDeleted;
  }
  --size_;
  return true;
}

void IdIndex::UndoInsert(int64_t id, int64_t row, bool from_unused) {
  DLRM_INTERNAL_CHECK(Find(id) == row);
  Erase(id);  // pushes the row on the freed stack, where a popped row came from
  if (!from_unused) return;
  DLRM_INTERNAL_CHECK(freed_rows_.back() == row && next_unused_row_ == row + 1);
  freed_rows_.pop_back();
  --next_unused_row_;
}

void IdIndex::UndoErase(int64_t id, int64_t row) {
  DLRM_INTERNAL_CHECK(!freed_rows_.empty() && freed_rows_.back() == row && size_ < capacity_);
  freed_rows_.pop_back();
  const uint64_t hash = Mix(id);
  size_t slot = 0;
  DLRM_INTERNAL_CHECK(!Locate(id, hash, &slot));
  if (tags_[slot] == kEmpty && growth_left_ == 0) {
    DropDeleted();
    Locate(id, hash, &slot);
  }
  PlaceNew(slot, TagOf(hash), id, row);
}

namespace {

// kDataLoss unless `row` is in [0, limit) and not marked in `used`; marks it.
void MarkRow(int64_t row, int64_t limit, std::vector<bool>& used, const char* what) {
  if (row < 0 || row >= limit)
    Throw(StatusCode::kDataLoss, "dynamic table state: ", what, " row ", row, " is outside [0, ",
          limit, ")");
  if (used[static_cast<size_t>(row)])
    Throw(StatusCode::kDataLoss, "dynamic table state: row ", row, " is given twice");
  used[static_cast<size_t>(row)] = true;
}

}  // namespace

void IdIndex::Restore(const std::vector<int64_t>& ids, const std::vector<int64_t>& rows,
                      const std::vector<int64_t>& freed_rows, int64_t next_unused_row) {
  if (next_unused_row < 0 || next_unused_row > capacity_ || ids.size() != rows.size() ||
      static_cast<int64_t>(ids.size() + freed_rows.size()) != next_unused_row)
    Throw(StatusCode::kDataLoss, "dynamic table state: ", ids.size(), " ids, ", rows.size(),
          " rows and ", freed_rows.size(), " freed rows do not account for the ", next_unused_row,
          " rows handed out (capacity ", capacity_, ")");
  std::vector<bool> used(static_cast<size_t>(next_unused_row), false);
  for (const int64_t row : freed_rows) MarkRow(row, next_unused_row, used, "freed");
  IdIndex fresh(capacity_);
  for (size_t i = 0; i < ids.size(); ++i) {
    MarkRow(rows[i], next_unused_row, used, "resident");
    size_t slot = 0;
    const uint64_t hash = Mix(ids[i]);
    if (fresh.Locate(ids[i], hash, &slot))
      Throw(StatusCode::kDataLoss, "dynamic table state: id ", ids[i], " is resident twice");
    fresh.PlaceNew(slot, TagOf(hash), ids[i], rows[i]);
  }
  fresh.freed_rows_.assign(freed_rows.begin(), freed_rows.end());
  fresh.next_unused_row_ = next_unused_row;
  *this = std::move(fresh);
}

void IdIndex::DropDeleted() {
  const std::vector<int8_t> tags = tags_;
  const std::vector<Slot> slots = slots_;
  std::fill(tags_.begin(), tags_.end(), kEmpty);
  growth_left_ = static_cast<int64_t>(tags_.size() - tags_.size() / 8);
  size_ = 0;
  for (size_t s = 0; s < tags.size(); ++s) {
    if (tags[s] < 0) continue;
    size_t slot = 0;
    Locate(slots[s].id, Mix(slots[s].id), &slot);
    PlaceNew(slot, tags[s], slots[s].id, slots[s].row);
  }
}

}  // namespace dlrm

// The dynamic table's id -> row map (engine/embedding/id_index.h) against std::unordered_map
// under random inserts and erases with heavy churn (deleted tags, rebuilds), every int64
// id including the extremes and ids that differ only in their high bits; rows unique and
// in range, handed out deterministically; a full table refuses a new id changing nothing.
#include "engine/embedding/id_index.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <set>
#include <unordered_map>
#include <vector>

#include "engine/core/philox.h"
#include "engine/core/status.h"

namespace dlrm {
namespace {

using ::testing::HasSubstr;

// Every id resident in `index` is in `oracle` with the same row and back; rows distinct.
void ExpectSameAs(const IdIndex& index, const std::unordered_map<int64_t, int64_t>& oracle) {
  ASSERT_EQ(index.size(), static_cast<int64_t>(oracle.size()));
  std::set<int64_t> rows;
  int64_t visited = 0;
  index.ForEach([&](int64_t id, int64_t row) {
    ++visited;
    auto it = oracle.find(id);
    ASSERT_NE(it, oracle.end()) << id;
    EXPECT_EQ(it->second, row) << id;
    EXPECT_TRUE(rows.insert(row).second) << "row " << row << " given twice";
    EXPECT_GE(row, 0);
    EXPECT_LT(row, index.capacity());
  });
  EXPECT_EQ(visited, index.size());
  for (const auto& [id, row] : oracle) ASSERT_EQ(index.Find(id), row) << id;
}

// Ids from a few families: small, random 64-bit, multiples of 2^32 (equal low bits).
int64_t DrawId(const CounterRng& rng, uint64_t& draw) {
  const double u = rng.Uniform(draw++);
  const auto k = static_cast<int64_t>(rng.Uniform(draw++) * 4000);
  if (u < 0.4) return k;
  if (u < 0.7) return k * (int64_t{1} << 32);
  return static_cast<int64_t>(rng.Uniform(draw++) * 1.8e19 - 9e18) ^ k;
}

TEST(IdIndexTest, MatchesAMapUnderChurn) {
  for (const int64_t capacity : {1, 7, 100, 3000}) {
    SCOPED_TRACE(capacity);
    IdIndex index(capacity);
    std::unordered_map<int64_t, int64_t> oracle;
    const CounterRng rng(capacity, 1, 0);
    uint64_t draw = 0;
    for (int op = 0; op < 40000; ++op) {
      const int64_t id = DrawId(rng, draw);
      if (rng.Uniform(draw++) < 0.45 || static_cast<int64_t>(oracle.size()) == capacity) {
        EXPECT_EQ(index.Erase(id), oracle.erase(id) == 1) << id;
      } else {
        bool inserted = false;
        const int64_t row = index.Insert(id, &inserted);
        auto [it, added] = oracle.emplace(id, row);
        EXPECT_EQ(inserted, added) << id;
        EXPECT_EQ(it->second, row) << id;
      }
      if (op % 5000 == 0) ExpectSameAs(index, oracle);
    }
    ExpectSameAs(index, oracle);
    for (const int64_t missing : {int64_t{-12345}, int64_t{987654321}})
      if (!oracle.count(missing)) {
        EXPECT_EQ(index.Find(missing), IdIndex::kNotFound);
      }
  }
}

// A full table churned for many times its slot count: lookups of missing ids still end
// (deleted tags are dropped in rebuilds) and every resident id is still found.
TEST(IdIndexTest, StaysFindableWhenFullAndChurned) {
  IdIndex index(104);  // exactly 13/16 of 128 slots, the fullest an index gets
  std::unordered_map<int64_t, int64_t> oracle;
  int64_t next = 0;
  for (; next < 104; ++next) oracle[next * 1000003] = index.Insert(next * 1000003);
  for (int round = 0; round < 5000; ++round) {
    const int64_t victim = (next - 104) * 1000003;
    ASSERT_TRUE(index.Erase(victim));
    oracle.erase(victim);
    oracle[next * 1000003] = index.Insert(next * 1000003);
    ++next;
    EXPECT_EQ(index.Find(-1), IdIndex::kNotFound);
  }
  ExpectSameAs(index, oracle);
}

TEST(IdIndexTest, TakesEveryInt64) {
  IdIndex index(8);
  const int64_t ids[] = {std::numeric_limits<int64_t>::min(),
                         std::numeric_limits<int64_t>::max(),
                         0,
                         -1,
                         1,
                         int64_t{1} << 62};
  for (const int64_t id : ids) index.Insert(id);
  for (size_t i = 0; i < std::size(ids); ++i)
    EXPECT_EQ(index.Find(ids[i]), static_cast<int64_t>(i));
  std::vector<int64_t> rows(std::size(ids));
  index.FindBatch(ids, static_cast<int64_t>(std::size(ids)), rows.data());
  EXPECT_EQ(rows, (std::vector<int64_t>{0, 1, 2, 3, 4, 5}));
}

// Rows: the lowest never used, after the most recently freed; the same history gives the
// same rows (no seed, no address in the hash).
TEST(IdIndexTest, HandsOutRowsDeterministically) {
  IdIndex a(10), b(10);
  for (IdIndex* index : {&a, &b}) {
    for (int64_t id = 100; id < 105; ++id) EXPECT_EQ(index->Insert(id), id - 100);
    EXPECT_TRUE(index->Erase(101));
    EXPECT_TRUE(index->Erase(103));
    EXPECT_FALSE(index->Erase(103));
    EXPECT_EQ(index->Insert(7), 3);  // the last freed
    EXPECT_EQ(index->Insert(8), 1);
    EXPECT_EQ(index->Insert(9), 5);  // then never used
    EXPECT_EQ(index->Insert(7), 3);  // resident: its row
  }
  std::vector<std::pair<int64_t, int64_t>> in_a, in_b;
  a.ForEach([&](int64_t id, int64_t row) { in_a.emplace_back(id, row); });
  b.ForEach([&](int64_t id, int64_t row) { in_b.emplace_back(id, row); });
  EXPECT_EQ(in_a, in_b);
  a.Clear();
  EXPECT_EQ(a.size(), 0);
  EXPECT_EQ(a.Find(100), IdIndex::kNotFound);
  EXPECT_EQ(a.Insert(55), 0);
}

TEST(IdIndexTest, AFullTableRefusesANewIdChangingNothing) {
  IdIndex index(3);
  for (int64_t id = 0; id < 3; ++id) index.Insert(id * 7);
  try {
    index.Insert(99);
    ADD_FAILURE() << "a fourth id was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), StatusCode::kResourceExhausted);
    EXPECT_THAT(e.what(), HasSubstr("all 3 rows are taken and id 99 needs one"));
  }
  EXPECT_EQ(index.size(), 3);
  EXPECT_EQ(index.Find(99), IdIndex::kNotFound);
  EXPECT_EQ(index.Insert(14), 2);  // resident ids still resolve
  EXPECT_GT(index.memory_bytes(), 0u);
}

TEST(IdIndexTest, RefusesCapacitiesOutOfRange) {
  for (const int64_t capacity : {int64_t{0}, int64_t{-5}, IdIndex::kMaxCapacity + 1}) {
    try {
      IdIndex index(capacity);
      ADD_FAILURE() << capacity << " was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), StatusCode::kInvalidArgument);
      EXPECT_THAT(e.what(), HasSubstr("capacity must be in [1, 2^40]"));
    }
  }
}

}  // namespace
}  // namespace dlrm

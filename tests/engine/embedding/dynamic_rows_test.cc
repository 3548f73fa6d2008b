// The dynamic table's admission and eviction (engine/embedding/dynamic_rows.h): LRU, LFU
// and TTL victims by hand, a step's own ids never evicted, admission after min_count
// occurrences, and determinism: the same steps give the same rows and changes, and the
// order of ids inside a step changes nothing. Bad options and a step going back are
// refused naming them.
#include "engine/embedding/dynamic_rows.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <set>
#include <utility>
#include <vector>

#include "engine/core/philox.h"
#include "engine/core/status.h"

namespace dlrm {
namespace {

using ::testing::HasSubstr;
using Eviction = DynamicRowsOptions::Eviction;
using Pairs = std::vector<std::pair<int64_t, int64_t>>;

DynamicRowsOptions Options(int64_t capacity, Eviction eviction = Eviction::kLru) {
  DynamicRowsOptions o;
  o.capacity = capacity;
  o.eviction = eviction;
  return o;
}

// Resolves one step; returns the rows.
std::vector<int64_t> Step(DynamicRows& d, std::vector<int64_t> ids, int64_t step,
                          RowChanges* changes) {
  std::vector<int64_t> rows(ids.size());
  d.Resolve(ids.data(), static_cast<int64_t>(ids.size()), step, rows.data(), changes);
  return rows;
}

TEST(DynamicRowsTest, LruEvictsTheLeastRecentlyUsedRowNotInTheStep) {
  DynamicRows d(Options(3));
  RowChanges c;
  EXPECT_EQ(Step(d, {3, 1, 2}, 1, &c), (std::vector<int64_t>{2, 0, 1}));  // ascending id order
  EXPECT_EQ(c.admitted, (Pairs{{1, 0}, {2, 1}, {3, 2}}));
  EXPECT_EQ(Step(d, {1, 4, 1}, 2, &c), (std::vector<int64_t>{0, 1, 0}));
  EXPECT_EQ(c.evicted, (Pairs{{2, 1}}));  // 2 and 3 untouched since step 1: 2 first
  EXPECT_EQ(c.admitted, (Pairs{{4, 1}}));
  Step(d, {5}, 3, &c);
  EXPECT_EQ(c.evicted, (Pairs{{3, 2}}));
  EXPECT_EQ(d.stats().hits, 2);
  EXPECT_EQ(d.stats().admitted, 5);
  EXPECT_EQ(d.stats().evicted, 2);
  EXPECT_EQ(d.stats().lookups, 7);
  EXPECT_EQ(d.last_step(0), 2);
  EXPECT_EQ(d.count(0), 3);
}

// More new ids than rows: the lowest ids get the rows, the others none this step; a
// step's own ids are never evicted for another of its ids.
TEST(DynamicRowsTest, AStepNeverEvictsItsOwnIds) {
  DynamicRows d(Options(2));
  RowChanges c;
  EXPECT_EQ(Step(d, {30, 10, 20}, 1, &c), (std::vector<int64_t>{DynamicRows::kNoRow, 0, 1}));
  EXPECT_EQ(d.stats().rejected, 1);
  EXPECT_EQ(Step(d, {10, 30}, 2, &c), (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(c.evicted, (Pairs{{20, 1}}));
  EXPECT_EQ(Step(d, {10, 30, 40}, 3, &c), (std::vector<int64_t>{0, 1, DynamicRows::kNoRow}));
  EXPECT_TRUE(c.evicted.empty());
  EXPECT_EQ(d.stats().rejected, 2);
}

TEST(DynamicRowsTest, LfuEvictsTheLeastCountedRows) {
  DynamicRows d(Options(3, Eviction::kLfu));
  RowChanges c;
  Step(d, {1, 1, 1, 2, 3, 3}, 1, &c);
  Step(d, {2}, 2, &c);  // 2 now has 2, like 3; 1 has 3
  Step(d, {4}, 3, &c);
  EXPECT_EQ(c.evicted, (Pairs{{3, 2}}));  // counts tie at 2: 3 was used longer ago
  Step(d, {5}, 4, &c);
  EXPECT_EQ(c.evicted, (Pairs{{4, 2}}));  // 4 has 1
  EXPECT_EQ(d.index().Find(1), 0);
}

TEST(DynamicRowsTest, TtlExpiresRowsUntouchedTooLongEvenWithRoomLeft) {
  DynamicRowsOptions o = Options(10, Eviction::kTtl);
  o.ttl_steps = 2;
  DynamicRows d(o);
  RowChanges c;
  Step(d, {1, 2}, 1, &c);
  Step(d, {2}, 3, &c);  // 1 untouched for 2 steps: kept
  EXPECT_TRUE(c.evicted.empty());
  Step(d, {}, 4, &c);  // 1 for 3 steps: expired; 2 for 1
  EXPECT_EQ(c.evicted, (Pairs{{1, 0}}));
  // Back, with the row freed last (2's, expired this step before admission).
  EXPECT_EQ(Step(d, {1}, 6, &c), (std::vector<int64_t>{1}));
  EXPECT_EQ(c.evicted, (Pairs{{2, 1}}));
  EXPECT_EQ(c.admitted, (Pairs{{1, 1}}));
  EXPECT_EQ(d.size(), 1);
}

TEST(DynamicRowsTest, AdmitsAnIdAfterMinCountOccurrences) {
  DynamicRowsOptions o = Options(10);
  o.min_count = 3;
  o.sketch_width = 1024;
  DynamicRows d(o);
  RowChanges c;
  EXPECT_EQ(Step(d, {7}, 1, &c), (std::vector<int64_t>{DynamicRows::kNoRow}));
  EXPECT_EQ(Step(d, {7}, 2, &c), (std::vector<int64_t>{DynamicRows::kNoRow}));
  EXPECT_EQ(Step(d, {7, 8, 8, 8}, 3, &c), (std::vector<int64_t>{0, 1, 1, 1}));
  EXPECT_EQ(c.admitted, (Pairs{{7, 0}, {8, 1}}));
  EXPECT_EQ(d.stats().hits, 0);
  EXPECT_GT(d.memory_bytes(), 4u * 1024 * sizeof(uint32_t));
}

// Random steps of hot and cold ids (more distinct ids than rows).
std::vector<int64_t> RandomStep(const CounterRng& rng, uint64_t& draw) {
  std::vector<int64_t> ids;
  for (int i = 0; i < 40; ++i) {
    const double u = rng.Uniform(draw++);
    ids.push_back(static_cast<int64_t>(u * u * u * 500) * 7919 - 100000);
  }
  return ids;
}

DynamicRowsOptions ChurnOptions(Eviction eviction) {
  DynamicRowsOptions o = Options(64, eviction);
  o.ttl_steps = 5;
  o.min_count = 2;
  o.sketch_width = 256;
  return o;
}

// A random stream of steps (hot and cold ids, more distinct ids than rows) for every
// policy: two tables agree on every row and change, shuffling the ids inside each step
// changes no decision, and the invariants hold throughout.
TEST(DynamicRowsTest, SameStepsSameDecisionsWhateverTheOrderInsideAStep) {
  for (const Eviction eviction : {Eviction::kLru, Eviction::kLfu, Eviction::kTtl}) {
    const DynamicRowsOptions o = ChurnOptions(eviction);
    DynamicRows a(o), b(o);
    const CounterRng rng(static_cast<uint64_t>(eviction) + 1, 9, 0);
    uint64_t draw = 0;
    for (int64_t step = 1; step <= 300; ++step) {
      const std::vector<int64_t> ids = RandomStep(rng, draw);
      std::vector<int64_t> shuffled = ids;
      std::reverse(shuffled.begin(), shuffled.end());
      RowChanges ca, cb;
      const std::vector<int64_t> rows_a = Step(a, ids, step, &ca);
      std::vector<int64_t> rows_b = Step(b, shuffled, step, &cb);
      std::reverse(rows_b.begin(), rows_b.end());
      ASSERT_EQ(rows_a, rows_b) << "step " << step;
      ASSERT_EQ(ca.admitted, cb.admitted) << "step " << step;
      ASSERT_EQ(ca.evicted, cb.evicted) << "step " << step;
      const std::set<int64_t> in_step(ids.begin(), ids.end());
      for (const auto& [id, row] : ca.evicted) EXPECT_EQ(in_step.count(id), 0u) << id;
      for (size_t i = 0; i < ids.size(); ++i) ASSERT_EQ(rows_a[i], a.index().Find(ids[i]));
      ASSERT_LE(a.size(), 64);
    }
    std::map<int64_t, int64_t> by_row;
    a.ForEachByRecency(
        [&](int64_t id, int64_t row) { EXPECT_TRUE(by_row.emplace(row, id).second); });
    EXPECT_EQ(static_cast<int64_t>(by_row.size()), a.size());
    EXPECT_GT(a.stats().evicted, 0);
    EXPECT_GT(a.stats().hits, 0);
  }
}

// A table restored from a snapshot taken mid-stream makes the original's decisions.
TEST(DynamicRowsTest, ARestoredSnapshotContinuesBitwise) {
  for (const Eviction eviction : {Eviction::kLru, Eviction::kLfu, Eviction::kTtl}) {
    const DynamicRowsOptions o = ChurnOptions(eviction);
    DynamicRows original(o), restored(o);
    const CounterRng rng(7, 9, 0);
    uint64_t draw = 0;
    RowChanges c;
    for (int64_t step = 0; step < 150; ++step) Step(original, RandomStep(rng, draw), step, &c);
    Step(restored, {1, 2, 3}, 0, &c);  // state to be replaced
    restored.Restore(original.Snapshot());
    for (int64_t step = 150; step < 300; ++step) {
      const std::vector<int64_t> ids = RandomStep(rng, draw);
      RowChanges ca, cb;
      ASSERT_EQ(Step(original, ids, step, &ca), Step(restored, ids, step, &cb)) << step;
      ASSERT_EQ(ca.admitted, cb.admitted) << step;
      ASSERT_EQ(ca.evicted, cb.evicted) << step;
    }
    EXPECT_EQ(original.stats().evicted, restored.stats().evicted);
    EXPECT_EQ(original.stats().lookups, restored.stats().lookups);
    EXPECT_EQ(original.Snapshot().ids, restored.Snapshot().ids);
  }
}

bool SameState(const DynamicRowsSnapshot& a, const DynamicRowsSnapshot& b) {
  return a.ids == b.ids && a.rows == b.rows && a.last_steps == b.last_steps &&
         a.counts == b.counts && a.freed_rows == b.freed_rows &&
         a.next_unused_row == b.next_unused_row && a.sketch == b.sketch &&
         a.last_resolved_step == b.last_resolved_step && a.stats.lookups == b.stats.lookups &&
         a.stats.hits == b.stats.hits && a.stats.admitted == b.stats.admitted &&
         a.stats.evicted == b.stats.evicted && a.stats.rejected == b.stats.rejected;
}

// A step taken back (the engine's step failed after resolving) leaves exactly the state
// before it, for every policy and with admission counting: the snapshot is equal and the
// following steps decide as if it never happened.
TEST(DynamicRowsTest, AnUndoneStepLeavesTheStateBeforeIt) {
  for (const Eviction eviction : {Eviction::kLru, Eviction::kLfu, Eviction::kTtl}) {
    const DynamicRowsOptions o = ChurnOptions(eviction);
    DynamicRows undone(o), control(o);
    const CounterRng rng(11, 9, 0);
    uint64_t draw = 0;
    RowChanges c;
    DynamicRowsUndo undo;
    int64_t evictions_undone = 0, admissions_undone = 0;
    for (int64_t step = 0; step < 200; ++step) {
      const std::vector<int64_t> ids = RandomStep(rng, draw);
      if (step % 3 == 2) {  // a failed step: resolved, then taken back
        const DynamicRowsSnapshot before = undone.Snapshot();
        const std::vector<int64_t> failed = RandomStep(rng, draw);
        std::vector<int64_t> rows(failed.size());
        undone.Resolve(failed.data(), static_cast<int64_t>(failed.size()), step, rows.data(), &c,
                       &undo);
        evictions_undone += static_cast<int64_t>(undo.evicted.size());
        admissions_undone += static_cast<int64_t>(undo.admitted.size());
        undone.Undo(undo);
        ASSERT_TRUE(SameState(undone.Snapshot(), before)) << step;
      }
      RowChanges ca, cb;
      ASSERT_EQ(Step(undone, ids, step, &ca), Step(control, ids, step, &cb)) << step;
      ASSERT_EQ(ca.admitted, cb.admitted) << step;
      ASSERT_EQ(ca.evicted, cb.evicted) << step;
    }
    EXPECT_TRUE(SameState(undone.Snapshot(), control.Snapshot()));
    EXPECT_GT(evictions_undone, 0);
    EXPECT_GT(admissions_undone, 0);
  }
}

// Damaged snapshots are refused naming what is wrong; the table is unchanged.
TEST(DynamicRowsTest, ADamagedSnapshotIsRefusedChangingNothing) {
  const DynamicRowsOptions o = ChurnOptions(Eviction::kTtl);
  DynamicRows table(o);
  const CounterRng rng(3, 9, 0);
  uint64_t draw = 0;
  RowChanges c;
  for (int64_t step = 0; step < 50; ++step) Step(table, RandomStep(rng, draw), step, &c);
  Step(table, {}, 53, &c);  // rows untouched since step 47 expire: freed rows to check
  const DynamicRowsSnapshot good = table.Snapshot();
  ASSERT_GE(good.ids.size(), 2u);
  ASSERT_GE(good.freed_rows.size(), 1u);
  auto expect_refused = [&](DynamicRowsSnapshot bad, const std::string& expected) {
    try {
      table.Restore(bad);
      ADD_FAILURE() << "accepted; expected " << expected;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), StatusCode::kDataLoss);
      EXPECT_THAT(e.what(), HasSubstr(expected));
    }
    EXPECT_EQ(table.Snapshot().ids, good.ids);
  };
  DynamicRowsSnapshot bad = good;
  bad.ids[1] = bad.ids[0];
  expect_refused(bad, "is resident twice");
  bad = good;
  bad.rows[1] = bad.rows[0];
  expect_refused(bad, "is given twice");
  bad = good;
  bad.rows[0] = bad.next_unused_row;
  expect_refused(bad, "resident row " + std::to_string(bad.next_unused_row) + " is outside");
  bad = good;
  bad.freed_rows.push_back(bad.rows[0]);
  expect_refused(bad, "do not account for");
  bad = good;
  bad.freed_rows[0] = bad.rows[0];
  expect_refused(bad, "is given twice");
  bad = good;
  bad.sketch.pop_back();
  expect_refused(bad, "a sketch of 1023 counters where the options make 1024");
  bad = good;
  bad.counts[0] = 0;
  expect_refused(bad, "has count 0");
  bad = good;
  bad.last_steps[0] = bad.last_resolved_step + 1;
  expect_refused(bad, "last step resolved");
  bad = good;
  std::swap(bad.last_steps.front(), bad.last_steps.back());
  expect_refused(bad, "in recency order");
  bad = good;
  bad.counts.pop_back();
  expect_refused(bad, "last steps and");
}

TEST(DynamicRowsTest, RefusesBadOptionsAndStepsGoingBack) {
  auto expect_refused = [](DynamicRowsOptions o, const std::string& expected) {
    try {
      DynamicRows d(o);
      ADD_FAILURE() << "accepted; expected " << expected;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), StatusCode::kInvalidArgument);
      EXPECT_THAT(e.what(), HasSubstr(expected));
    }
  };
  expect_refused(Options(0), "capacity must be in [1, 2^40], got 0");
  expect_refused(Options(4, Eviction::kTtl), "ttl_steps must be >= 1 for TTL eviction, got 0");
  DynamicRowsOptions o = Options(4);
  o.min_count = 0;
  expect_refused(o, "min_count must be >= 1, got 0");
  o.min_count = 2;
  o.sketch_width = 1000;
  expect_refused(o, "sketch_width must be a power of two in [64, 2^30], got 1000");

  DynamicRows d(Options(4));
  RowChanges c;
  Step(d, {1, 2}, 5, &c);
  try {
    Step(d, {3}, 4, &c);
    ADD_FAILURE() << "step 4 after step 5 was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(e.what(), HasSubstr("step 4 is before the last step resolved, 5"));
  }
  EXPECT_EQ(d.size(), 2);
  EXPECT_EQ(d.index().Find(3), IdIndex::kNotFound);
}

}  // namespace
}  // namespace dlrm

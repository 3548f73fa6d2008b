// The SSD tier's row store (engine/embedding/row_store.h): rows come back bitwise, per
// table, across a reopen and from a copy; a write survives SIGKILL of its writer once it
// returned; bad arguments, rows of another width and unopenable directories are refused
// naming what is wrong.
#include "engine/embedding/row_store.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "engine/core/philox.h"
#include "engine/core/status.h"
#include "tests/support/test_support.h"

namespace dlrm {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kWidth = 12;

RowStoreOptions At(const std::string& path) {
  RowStoreOptions o;
  o.path = path;
  return o;
}

// Rows of random bits (any float, NaN payloads included, must come back bitwise).
std::vector<float> RandomRows(int64_t n, uint64_t salt) {
  std::vector<float> values(static_cast<size_t>(n * kWidth));
  const CounterRng rng(salt, 5, 0);
  for (size_t i = 0; i < values.size(); ++i) {
    const auto bits = static_cast<uint32_t>(rng.Uniform(i) * 4294967296.0);
    std::memcpy(&values[i], &bits, sizeof bits);
  }
  return values;
}

std::vector<int64_t> SomeIds(int64_t n) {
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < n - 3; ++i) ids.push_back(i * 7919 - 100000);
  ids.push_back(std::numeric_limits<int64_t>::min());
  ids.push_back(std::numeric_limits<int64_t>::max());
  ids.push_back(-1);
  return ids;
}

// Every id of `ids` reads back as `want`, bitwise.
void ExpectRows(const RowStore& store, int32_t table, const std::vector<int64_t>& ids,
                const std::vector<float>& want) {
  const auto n = static_cast<int64_t>(ids.size());
  std::vector<float> got(want.size());
  std::unique_ptr<bool[]> found(new bool[ids.size()]);
  ASSERT_EQ(store.Read(table, ids.data(), n, kWidth, got.data(), found.get()), n);
  EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)), 0);
}

TEST(RowStoreTest, RowsComeBackBitwisePerTableAcrossAReopen) {
  const std::string dir = testing::TempDir("row_store_roundtrip") + "/db";
  const std::vector<int64_t> ids = SomeIds(1000);
  const auto n = static_cast<int64_t>(ids.size());
  const std::vector<float> t0 = RandomRows(n, 1), t1 = RandomRows(n, 2);
  {
    RowStore store(At(dir));
    store.Write(0, ids.data(), n, t0.data(), kWidth);
    store.Write(1, ids.data(), n, t1.data(), kWidth);  // the same ids in another table
    ExpectRows(store, 0, ids, t0);
    ExpectRows(store, 1, ids, t1);
  }
  RowStore reopened(At(dir));
  ExpectRows(reopened, 0, ids, t0);
  ExpectRows(reopened, 1, ids, t1);

  // An id not stored is not found and its output row is left as it was.
  const int64_t probe[] = {ids[5], 123456789, ids[7]};
  std::vector<float> out(3 * kWidth, 42.0f);
  bool found[3];
  EXPECT_EQ(reopened.Read(0, probe, 3, kWidth, out.data(), found), 2);
  EXPECT_TRUE(found[0] && !found[1] && found[2]);
  for (int64_t j = 0; j < kWidth; ++j) EXPECT_EQ(out[kWidth + j], 42.0f);
  EXPECT_EQ(std::memcmp(out.data(), t0.data() + 5 * kWidth, kWidth * sizeof(float)), 0);

  // ForEach visits a table's rows in id order.
  std::vector<int64_t> order;
  reopened.ForEach(1, kWidth, [&](int64_t id, const float*) { order.push_back(id); });
  EXPECT_EQ(order.size(), ids.size());
  EXPECT_TRUE(std::is_sorted(order.begin(), order.end()));
  EXPECT_EQ(order.front(), std::numeric_limits<int64_t>::min());
}

TEST(RowStoreTest, AWriteReplacesAndEraseRemoves) {
  RowStore store(At(testing::TempDir("row_store_replace") + "/db"));
  const std::vector<int64_t> ids = {3, 4, 5};
  const std::vector<float> first = RandomRows(3, 3), second = RandomRows(3, 4);
  store.Write(0, ids.data(), 3, first.data(), kWidth);
  store.Write(0, ids.data(), 3, second.data(), kWidth);
  ExpectRows(store, 0, ids, second);
  store.Erase(0, ids.data() + 1, 1);
  std::vector<float> out(3 * kWidth);
  bool found[3];
  EXPECT_EQ(store.Read(0, ids.data(), 3, kWidth, out.data(), found), 2);
  EXPECT_FALSE(found[1]);
}

// A scan sees rows still in the memtable and rows flushed to table files as one
// id-ordered table, each row's last write, other tables' rows left out.
TEST(RowStoreTest, AScanIsInIdOrderAcrossMemtableAndFiles) {
  const std::string dir = testing::TempDir("row_store_scan");
  RowStore store(At(dir + "/db"));
  std::vector<int64_t> ids = SomeIds(600);
  std::reverse(ids.begin(), ids.end());  // written out of order
  const auto half = static_cast<int64_t>(ids.size() / 2), n = static_cast<int64_t>(ids.size());
  const std::vector<float> rows = RandomRows(n, 7), newer = RandomRows(half, 8);
  store.Write(3, ids.data(), half, rows.data(), kWidth);
  store.CopyTo(dir + "/copy");  // flushes the memtable: the first half is in a table file
  store.Write(3, ids.data() + half, n - half, rows.data() + half * kWidth, kWidth);
  store.Write(3, ids.data(), half / 2, newer.data(), kWidth);  // in both, the memtable's wins
  store.Write(4, ids.data(), 1, rows.data(), kWidth);
  std::vector<int64_t> order;
  std::vector<float> seen;
  store.ForEach(3, kWidth, [&](int64_t id, const float* row) {
    order.push_back(id);
    seen.insert(seen.end(), row, row + kWidth);
  });
  std::vector<int64_t> sorted = ids;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(order, sorted);
  for (int64_t i = 0; i < n; ++i) {
    const auto at = static_cast<size_t>(std::lower_bound(sorted.begin(), sorted.end(), ids[i]) -
                                        sorted.begin());
    const float* want = i < half / 2 ? newer.data() + i * kWidth : rows.data() + i * kWidth;
    EXPECT_EQ(std::memcmp(seen.data() + at * kWidth, want, kWidth * sizeof(float)), 0) << i;
  }
}

// A copy holds what was written before it, and later writes to the original do not
// reach it: what a checkpoint of an SSD table is built on.
TEST(RowStoreTest, ACopyIsTheStateWhenItWasTaken) {
  const std::string dir = testing::TempDir("row_store_copy");
  RowStore store(At(dir + "/db"));
  const std::vector<int64_t> ids = SomeIds(200);
  const auto n = static_cast<int64_t>(ids.size());
  const std::vector<float> before = RandomRows(n, 5), after = RandomRows(n, 6);
  store.Write(2, ids.data(), n, before.data(), kWidth);
  store.CopyTo(dir + "/copy");
  store.Write(2, ids.data(), n, after.data(), kWidth);
  RowStore copy(At(dir + "/copy"));
  ExpectRows(copy, 2, ids, before);
  ExpectRows(store, 2, ids, after);
  try {
    store.CopyTo(dir + "/copy");
    ADD_FAILURE() << "copied over an existing directory";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), StatusCode::kIo);
    EXPECT_THAT(e.what(), HasSubstr(dir + "/copy"));
  }
}

// Issue 14, acceptance 4's ground: a writer killed with SIGKILL loses nothing of the
// writes that returned. The child writes batch after batch and reports each one done
// through a pipe; the parent kills it mid-stream and reopens the store.
TEST(RowStoreTest, AReturnedWriteSurvivesSigkillOfItsWriter) {
  const std::string dir = testing::TempDir("row_store_kill") + "/db";
  int done[2];
  ASSERT_EQ(pipe(done), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(done[0]);
    RowStore store(At(dir));
    for (int64_t batch = 0;; ++batch) {
      const std::vector<int64_t> ids = {batch * 2, batch * 2 + 1};
      const std::vector<float> rows = RandomRows(2, static_cast<uint64_t>(batch));
      store.Write(0, ids.data(), 2, rows.data(), kWidth);
      if (write(done[1], &batch, sizeof batch) != sizeof batch) _exit(1);
    }
  }
  close(done[1]);
  int64_t last = -1;
  while (last < 200 && read(done[0], &last, sizeof last) == sizeof last) {
  }
  kill(child, SIGKILL);
  int status = 0;
  waitpid(child, &status, 0);
  close(done[0]);
  ASSERT_TRUE(WIFSIGNALED(status));
  ASSERT_GE(last, 200);
  RowStore store(At(dir));
  for (int64_t batch = 0; batch <= last; ++batch) {
    const std::vector<int64_t> ids = {batch * 2, batch * 2 + 1};
    ExpectRows(store, 0, ids, RandomRows(2, static_cast<uint64_t>(batch)));
  }
}

TEST(RowStoreTest, BadCallsAreRefusedNamingWhatIsWrong) {
  const std::string dir = testing::TempDir("row_store_bad");
  RowStore store(At(dir + "/db"));
  const int64_t id = 9;
  std::vector<float> row(kWidth, 1.0f);
  bool found = false;
  const auto expect = [](StatusCode code, const std::string& needle, auto call) {
    try {
      call();
      ADD_FAILURE() << needle;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), code) << e.what();
      EXPECT_THAT(e.what(), HasSubstr(needle));
    }
  };
  expect(StatusCode::kInvalidArgument, "width must be in [1, ",
         [&] { store.Write(0, &id, 1, row.data(), 0); });
  expect(StatusCode::kInvalidArgument, "table must be >= 0",
         [&] { store.Write(-1, &id, 1, row.data(), kWidth); });
  expect(StatusCode::kInvalidArgument, "number of ids must be >= 0",
         [&] { store.Erase(0, &id, -1); });
  expect(StatusCode::kInvalidArgument, "values is NULL",
         [&] { store.Write(0, &id, 1, nullptr, kWidth); });
  expect(StatusCode::kInvalidArgument, "found is NULL",
         [&] { store.Read(0, &id, 1, kWidth, row.data(), nullptr); });
  // A row stored at one width read at another is damage, named, and changes no output.
  store.Write(0, &id, 1, row.data(), kWidth);
  std::vector<float> wide(2 * kWidth, 7.0f);
  expect(StatusCode::kDataLoss, "table 0 id 9 has a row of 48 bytes, not 96",
         [&] { store.Read(0, &id, 1, 2 * kWidth, wide.data(), &found); });
  EXPECT_EQ(wide[0], 7.0f);
  // A directory that is a file, or that another store holds, does not open.
  std::ofstream(dir + "/file") << "x";
  expect(StatusCode::kIo, dir + "/file", [&] { RowStore other(At(dir + "/file")); });
  expect(StatusCode::kIo, dir + "/db", [&] { RowStore twice(At(dir + "/db")); });
}

}  // namespace
}  // namespace dlrm

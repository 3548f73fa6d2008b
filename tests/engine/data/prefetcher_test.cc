#include "engine/data/prefetcher.h"

#include <gtest/gtest.h>

#include <stdexcept>

namespace dlrm {
namespace {

TEST(PrefetcherTest, DeliversEveryBatchInOrder) {
  int produced = 0;
  Prefetcher prefetch(
      [&](OwnedBatch* b) {
        if (produced == 25) return false;
        b->batch_size = produced++;
        return true;
      },
      3);
  OwnedBatch b;
  for (int i = 0; i < 25; ++i) {
    ASSERT_TRUE(prefetch.Next(&b));
    EXPECT_EQ(b.batch_size, i);
  }
  EXPECT_FALSE(prefetch.Next(&b));
  EXPECT_FALSE(prefetch.Next(&b));
}

TEST(PrefetcherTest, RethrowsSourceErrorsAfterEarlierBatches) {
  int produced = 0;
  Prefetcher prefetch(
      [&](OwnedBatch* b) {
        if (produced == 2) throw std::runtime_error("bad line 3");
        b->batch_size = produced++;
        return true;
      },
      1);
  OwnedBatch b;
  EXPECT_TRUE(prefetch.Next(&b));
  EXPECT_TRUE(prefetch.Next(&b));
  EXPECT_THROW(prefetch.Next(&b), std::runtime_error);
}

TEST(PrefetcherTest, StopsCleanlyWhenAbandoned) {
  Prefetcher prefetch(
      [](OwnedBatch* b) {
        b->batch_size = 1;
        return true;
      },
      2);
  OwnedBatch b;
  EXPECT_TRUE(prefetch.Next(&b));
}  // destructor must not hang on an endless source

}  // namespace
}  // namespace dlrm

#include "engine/core/object_pool.h"

#include <gtest/gtest.h>

#include <set>
#include <thread>
#include <vector>

namespace dlrm {
namespace {

TEST(ObjectPoolTest, ReusesReturnedObjectsWithTheirCapacity) {
  ObjectPool<std::vector<float>> pool;
  const float* first = nullptr;
  {
    auto lease = pool.Acquire();
    lease->resize(1000);
    first = lease->data();
  }
  auto again = pool.Acquire();
  EXPECT_EQ(again->data(), first) << "the returned buffer must be handed out again";
  EXPECT_EQ(again->size(), 1000u);
}

TEST(ObjectPoolTest, SimultaneousLeasesAreDistinct) {
  ObjectPool<std::vector<int>> pool;
  auto a = pool.Acquire();
  auto b = pool.Acquire();
  EXPECT_NE(&*a, &*b);
}

TEST(ObjectPoolTest, ConcurrentUseNeverSharesAnObject) {
  ObjectPool<std::vector<int>> pool;
  constexpr int kThreads = 4, kRounds = 2000;
  std::vector<std::thread> threads;
  std::vector<int> errors(kThreads, 0);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int r = 0; r < kRounds; ++r) {
        auto lease = pool.Acquire();
        lease->assign(16, t);  // a shared object would show another thread's values
        for (int v : *lease) errors[t] += v != t;
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(errors[t], 0) << "thread " << t;
}

}  // namespace
}  // namespace dlrm

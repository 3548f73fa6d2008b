// The engine's reader-writer lock (engine/core/shared_mutex.h): once a writer waits, new
// readers are refused until it has had its turn (adversarial finding 8: a reader-preferring
// lock let predictions starve training), and readers share it otherwise.
#include "engine/core/shared_mutex.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <shared_mutex>
#include <thread>

namespace dlrm {
namespace {

using Clock = std::chrono::steady_clock;

TEST(WriterPreferringMutexTest, ReadersShareIt) {
  WriterPreferringMutex mu;
  std::shared_lock<WriterPreferringMutex> a(mu);
  ASSERT_TRUE(mu.try_lock_shared());
  mu.unlock_shared();
  EXPECT_FALSE(mu.try_lock());
}

TEST(WriterPreferringMutexTest, AWaitingWriterGoesBeforeNewReaders) {
  WriterPreferringMutex mu;
  mu.lock_shared();  // a reader inside
  std::atomic<bool> wrote{false};
  std::thread writer([&] {
    std::unique_lock<WriterPreferringMutex> lock(mu);
    wrote = true;
  });
  // Until the writer waits a new reader may still enter; once it waits, none may.
  bool refused = false;
  for (const auto deadline = Clock::now() + std::chrono::seconds(20);
       !refused && Clock::now() < deadline;) {
    if (mu.try_lock_shared()) {
      mu.unlock_shared();
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    } else {
      refused = true;
    }
  }
  EXPECT_TRUE(refused) << "new readers kept entering while a writer waited";
  EXPECT_FALSE(wrote);
  mu.unlock_shared();  // the reader inside leaves: the writer goes
  writer.join();
  EXPECT_TRUE(wrote);
  EXPECT_TRUE(mu.try_lock_shared());
  mu.unlock_shared();
}

}  // namespace
}  // namespace dlrm

// The asynchronous step queue: order, back-pressure, errors and cancellation.
#include "engine/train/async_step_queue.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

#include "engine/core/status.h"

namespace dlrm {
namespace {

using ::testing::HasSubstr;

std::unique_ptr<OwnedValidBatch> Tagged(int64_t tag) {
  OwnedBatch b;
  b.batch_size = tag;
  return std::make_unique<OwnedValidBatch>(std::move(b), std::vector<int64_t>{0});
}

TEST(AsyncStepQueueTest, RunsStepsInTicketOrder) {
  std::vector<int64_t> order;
  AsyncStepQueue queue(
      [&](const QueuedStep& now, const QueuedStep&) {
        const BatchView& b = now.batch->view;
        order.push_back(b.batch_size);
        return static_cast<float>(b.batch_size) * 0.5f;
      },
      2);
  std::vector<int64_t> tickets;
  for (int i = 1; i <= 10; ++i) tickets.push_back(queue.Submit(Tagged(i)));
  for (int i = 0; i < 10; ++i) {
    EXPECT_EQ(tickets[i], i + 1);
    EXPECT_EQ(queue.Wait(tickets[i]), (i + 1) * 0.5f);
  }
  EXPECT_EQ(order, (std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}));
}

// A step is shown the step queued behind it (a device copies that batch in meanwhile),
// and nothing when none is queued yet.
TEST(AsyncStepQueueTest, AStepSeesTheNextQueuedStep) {
  std::atomic<bool> release{false};
  std::vector<std::pair<int64_t, int64_t>> seen;  // (ticket, next ticket or 0)
  AsyncStepQueue queue(
      [&](const QueuedStep& now, const QueuedStep& next) {
        while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        EXPECT_EQ(now.batch->view.batch_size, now.ticket * 10);
        if (next.batch != nullptr) {
          EXPECT_EQ(next.batch->view.batch_size, next.ticket * 10);
        }
        seen.emplace_back(now.ticket, next.batch == nullptr ? 0 : next.ticket);
        return 0.0f;
      },
      4);
  for (int64_t t = 1; t <= 3; ++t) queue.Submit(Tagged(t * 10));
  release = true;
  queue.Drain();
  // Step 1 may have started before 2 was queued; 2 certainly saw 3, and 3 saw nothing.
  ASSERT_EQ(seen.size(), 3u);
  EXPECT_TRUE(seen[0].second == 0 || seen[0].second == 2);
  EXPECT_EQ(seen[1], std::make_pair(int64_t{2}, int64_t{3}));
  EXPECT_EQ(seen[2], std::make_pair(int64_t{3}, int64_t{0}));
}

TEST(AsyncStepQueueTest, SubmitBlocksWhileTheQueueIsFull) {
  std::atomic<bool> release{false};
  std::atomic<int> started{0};
  AsyncStepQueue queue(
      [&](const QueuedStep&, const QueuedStep&) {
        ++started;
        while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        return 0.0f;
      },
      1);
  queue.Submit(Tagged(1));  // runs (blocked in the step)
  while (started == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  queue.Submit(Tagged(2));  // waits in the queue: now full
  std::atomic<bool> third_submitted{false};
  std::thread producer([&] {
    queue.Submit(Tagged(3));
    third_submitted = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(third_submitted);
  release = true;
  producer.join();
  EXPECT_TRUE(third_submitted);
  queue.Drain();
  EXPECT_EQ(started, 3);
}

TEST(AsyncStepQueueTest, FailureCancelsQueuedStepsOnly) {
  std::atomic<bool> release{false};
  AsyncStepQueue queue(
      [&](const QueuedStep& now, const QueuedStep&) -> float {
        const BatchView& b = now.batch->view;
        while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        if (b.batch_size == 1) Throw(StatusCode::kFailedPrecondition, "step one failed");
        return 1.0f;
      },
      4);
  const int64_t t1 = queue.Submit(Tagged(1));
  const int64_t t2 = queue.Submit(Tagged(2));
  const int64_t t3 = queue.Submit(Tagged(3));
  release = true;
  try {
    queue.Wait(t1);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), StatusCode::kFailedPrecondition);
  }
  for (int64_t t : {t2, t3}) {
    try {
      queue.Wait(t);
      FAIL();
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), StatusCode::kCancelled);
      EXPECT_THAT(e.what(), HasSubstr("ticket 1"));
    }
  }
  EXPECT_EQ(queue.Wait(queue.Submit(Tagged(4))), 1.0f);  // later submissions run
}

TEST(AsyncStepQueueTest, UnknownAndRepeatedTicketsAreErrors) {
  AsyncStepQueue queue([](const QueuedStep&, const QueuedStep&) { return 2.0f; }, 2);
  EXPECT_THROW(queue.Wait(1), Error);
  const int64_t t = queue.Submit(Tagged(1));
  EXPECT_EQ(queue.Wait(t), 2.0f);
  try {
    queue.Wait(t);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(e.what(), HasSubstr("already waited"));
  }
  EXPECT_THROW(queue.Wait(-5), Error);
}

TEST(AsyncStepQueueTest, DestructorFinishesSubmittedSteps) {
  std::atomic<int> ran{0};
  {
    AsyncStepQueue queue(
        [&](const QueuedStep&, const QueuedStep&) {
          std::this_thread::sleep_for(std::chrono::milliseconds(2));
          ++ran;
          return 0.0f;
        },
        3);
    for (int i = 0; i < 3; ++i) queue.Submit(Tagged(i));
  }
  EXPECT_EQ(ran, 3);
}

// Finished steps' batches come back for refilling, never one still queued or running, and
// no more than depth + 1 are kept.
TEST(AsyncStepQueueTest, FinishedBatchesComeBackAsSpares) {
  AsyncStepQueue queue([](const QueuedStep&, const QueuedStep&) { return 0.0f; }, 2);
  EXPECT_EQ(queue.TakeSpare(), nullptr);
  std::vector<const OwnedValidBatch*> submitted;
  for (int i = 1; i <= 6; ++i) {
    std::unique_ptr<OwnedValidBatch> b = Tagged(i);
    submitted.push_back(b.get());
    queue.Wait(queue.Submit(std::move(b)));
  }
  std::vector<std::unique_ptr<OwnedValidBatch>> spares;
  while (auto spare = queue.TakeSpare()) spares.push_back(std::move(spare));
  ASSERT_EQ(spares.size(), 3u);  // depth + 1
  for (const auto& spare : spares)
    EXPECT_NE(std::find(submitted.begin(), submitted.begin() + 3, spare.get()),
              submitted.begin() + 3);  // the first three finished, then the list was full
  // A spare refilled carries the new batch only.
  OwnedBatch fresh;
  fresh.batch_size = 2;
  fresh.num_dense = 1;
  fresh.dense = {1.5f, 2.5f};
  fresh.labels = {0.0f, 1.0f};
  spares[0]->Refill(fresh.view(), {0}, nullptr);
  const float loss = queue.Wait(queue.Submit(std::move(spares[0])));
  EXPECT_EQ(loss, 0.0f);
}

}  // namespace
}  // namespace dlrm

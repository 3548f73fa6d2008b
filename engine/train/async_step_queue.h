// Runs training steps on a dedicated thread, in submission order, so that a host can
// prepare batch N+1 while batch N trains (the C ABI's submit/wait path).
//
// Submit copies nothing itself: it takes a validated batch that owns its storage (the
// engine validates and copies the caller's borrowed memory before submitting). The batches
// of finished steps are kept (up to depth + 1) for TakeSpare, so that a stream of batches
// of one shape reuses their storage instead of allocating (and faulting in) each. The queue is
// bounded: Submit blocks while `depth` steps are waiting, which is the back-pressure a fast
// producer needs. Steps run strictly in ticket order, so async training is exactly as deterministic
// as synchronous training. If a step fails, the steps queued behind it are cancelled (they were
// prepared assuming it would succeed); steps submitted afterwards run normally.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "engine/data/batch.h"

namespace dlrm {

// A queued step: its ticket and batch (null: none).
struct QueuedStep {
  int64_t ticket = 0;
  const ValidatedBatch* batch = nullptr;
};

class AsyncStepQueue {
 public:
  // Runs step `now`; `next` is the step queued behind it (batch null if none yet), which
  // stays queued and alive while `now` runs, so a device can copy it in meanwhile.
  using StepFn = std::function<float(const QueuedStep& now, const QueuedStep& next)>;

  AsyncStepQueue(StepFn step, size_t depth);
  // Finishes every submitted step, then stops the worker.
  ~AsyncStepQueue();
  AsyncStepQueue(const AsyncStepQueue&) = delete;
  AsyncStepQueue& operator=(const AsyncStepQueue&) = delete;

  // Queues a step; returns its ticket (1, 2, 3, ...). Blocks while the queue is full.
  int64_t Submit(std::unique_ptr<OwnedValidBatch> batch);
  // A finished step's batch to refill for the next Submit, or null if none is kept.
  std::unique_ptr<OwnedValidBatch> TakeSpare();

  // Blocks until the ticket's step has run; returns its loss or rethrows its error.
  // Each ticket can be waited for once; kInvalidArgument for an unknown ticket.
  float Wait(int64_t ticket);

  // Blocks until every submitted step has run (results stay available to Wait).
  void Drain();

 private:
  struct Result {
    float loss = 0;
    std::exception_ptr error;
  };
  void Run();

  StepFn step_;
  const size_t depth_;
  std::mutex mu_;
  std::condition_variable cv_;
  using Pending = std::pair<int64_t, std::unique_ptr<OwnedValidBatch>>;
  std::deque<Pending> pending_;
  std::vector<std::unique_ptr<OwnedValidBatch>> spare_;  // finished steps' batches
  std::map<int64_t, Result> done_;
  int64_t next_ticket_ = 1;
  int64_t running_ = 0;  // ticket in progress, 0 if none
  bool stopping_ = false;
  std::thread worker_;
};

}  // namespace dlrm

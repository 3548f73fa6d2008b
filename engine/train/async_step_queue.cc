#include "engine/train/async_step_queue.h"

#include <string>
#include <utility>

#include "engine/core/status.h"

namespace dlrm {

AsyncStepQueue::AsyncStepQueue(StepFn step, size_t depth)
    : step_(std::move(step)), depth_(depth == 0 ? 1 : depth) {
  worker_ = std::thread([this] { Run(); });
}

AsyncStepQueue::~AsyncStepQueue() {
  {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return pending_.empty() && running_ == 0; });
    stopping_ = true;
  }
  cv_.notify_all();
  worker_.join();
}

std::unique_ptr<OwnedValidBatch> AsyncStepQueue::TakeSpare() {
  std::lock_guard<std::mutex> lock(mu_);
  if (spare_.empty()) return nullptr;
  std::unique_ptr<OwnedValidBatch> batch = std::move(spare_.back());
  spare_.pop_back();
  return batch;
}

int64_t AsyncStepQueue::Submit(std::unique_ptr<OwnedValidBatch> batch) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this] { return pending_.size() < depth_; });
  const int64_t ticket = next_ticket_++;
  pending_.emplace_back(ticket, std::move(batch));
  cv_.notify_all();
  return ticket;
}

float AsyncStepQueue::Wait(int64_t ticket) {
  std::unique_lock<std::mutex> lock(mu_);
  if (ticket <= 0 || ticket >= next_ticket_)
    ThrowInvalid("ticket ", ticket, " was never issued (issued so far: 1..", next_ticket_ - 1, ")");
  cv_.wait(lock, [&] {
    if (done_.count(ticket)) return true;
    if (running_ == ticket) return false;
    for (const auto& p : pending_)
      if (p.first == ticket) return false;
    return true;  // neither done, running nor pending: already waited for
  });
  auto it = done_.find(ticket);
  if (it == done_.end()) ThrowInvalid("ticket ", ticket, " was already waited for");
  const Result result = it->second;
  done_.erase(it);
  if (result.error) std::rethrow_exception(result.error);
  return result.loss;
}

void AsyncStepQueue::Drain() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this] { return pending_.empty() && running_ == 0; });
}

void AsyncStepQueue::Run() {
  for (;;) {
    Pending item;
    QueuedStep next;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stopping_ || !pending_.empty(); });
      if (pending_.empty()) return;  // stopping, nothing left
      item = std::move(pending_.front());
      pending_.pop_front();
      running_ = item.first;
      // Only this thread pops or clears pending_: the front's batch stays alive while the
      // step runs.
      if (!pending_.empty()) next = {pending_.front().first, &pending_.front().second->batch()};
      cv_.notify_all();  // a slot is free for Submit
    }
    Result result;
    try {
      result.loss = step_({item.first, &item.second->batch()}, next);
    } catch (...) {
      result.error = std::current_exception();
    }
    std::lock_guard<std::mutex> lock(mu_);
    running_ = 0;
    if (result.error) {
      // Steps queued behind a failed one were prepared assuming it succeeded.
      for (auto& p : pending_) {
        Result cancelled;
        cancelled.error = std::make_exception_ptr(
            Error(StatusCode::kCancelled, "training step (ticket " + std::to_string(p.first) +
                                              ") cancelled: an earlier step (ticket " +
                                              std::to_string(item.first) + ") failed"));
        done_[p.first] = cancelled;
      }
      pending_.clear();
    }
    done_[item.first] = std::move(result);
    if (spare_.size() <= depth_) spare_.push_back(std::move(item.second));
    cv_.notify_all();
  }
}

}  // namespace dlrm

#include "engine/data/prefetcher.h"

#include <utility>

namespace dlrm {

Prefetcher::Prefetcher(std::function<bool(OwnedBatch*)> source, size_t depth)
    : source_(std::move(source)), depth_(depth == 0 ? 1 : depth) {
  thread_ = std::thread([this] { Run(); });
}

Prefetcher::~Prefetcher() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void Prefetcher::Run() {
  try {
    for (;;) {
      OwnedBatch batch;
      const bool more = source_(&batch);
      std::unique_lock<std::mutex> lock(mu_);
      if (!more) break;
      cv_.wait(lock, [this] { return stopping_ || ready_.size() < depth_; });
      if (stopping_) return;
      ready_.push_back(std::move(batch));
      cv_.notify_all();
    }
  } catch (...) {
    std::lock_guard<std::mutex> lock(mu_);
    error_ = std::current_exception();
  }
  std::lock_guard<std::mutex> lock(mu_);
  finished_ = true;
  cv_.notify_all();
}

bool Prefetcher::Next(OwnedBatch* batch) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this] { return !ready_.empty() || finished_; });
  if (!ready_.empty()) {
    *batch = std::move(ready_.front());
    ready_.pop_front();
    cv_.notify_all();
    return true;
  }
  if (error_) std::rethrow_exception(error_);
  return false;
}

}  // namespace dlrm

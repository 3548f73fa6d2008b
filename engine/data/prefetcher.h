// Runs a batch source on a background thread, a bounded number of batches ahead, so that
// parsing batch N+1 overlaps training on batch N.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

#include "engine/data/batch.h"

namespace dlrm {

class Prefetcher {
 public:
  // source fills a batch and returns false when exhausted; it runs on the prefetch thread.
  Prefetcher(std::function<bool(OwnedBatch*)> source, size_t depth);
  ~Prefetcher();
  Prefetcher(const Prefetcher&) = delete;
  Prefetcher& operator=(const Prefetcher&) = delete;

  // Next batch in source order; false at the end. Rethrows the source's exception.
  bool Next(OwnedBatch* batch);

 private:
  void Run();

  std::function<bool(OwnedBatch*)> source_;
  const size_t depth_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<OwnedBatch> ready_;
  bool finished_ = false;
  bool stopping_ = false;
  std::exception_ptr error_;
  std::thread thread_;
};

}  // namespace dlrm

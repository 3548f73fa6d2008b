// A fixed pool of worker threads running index-parallel loops.
//
// ParallelFor may be called from several threads at once (concurrent predictions share
// one pool); the calling thread works on its own loop too, so a pool of N threads keeps
// N cores busy. Results never depend on which thread ran which index: callers give each
// index its own output and combine them in a fixed order afterwards.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace dlrm {

// A configured thread count made concrete: 0 (or less) means one per core.
int ResolveThreadCount(int configured);

class ThreadPool {
 public:
  // num_threads counts the caller: 1 means run everything inline, no workers.
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return num_threads_; }

  // Runs fn(i) for i in [0, n). Blocks until all are done; rethrows the first exception.
  void ParallelFor(int64_t n, const std::function<void(int64_t)>& fn);

 private:
  struct Job;
  void WorkerLoop();
  static void RunIndices(Job& job);

  const int num_threads_;
  std::mutex mu_;
  std::condition_variable work_cv_;
  std::deque<std::shared_ptr<Job>> jobs_;
  bool stopping_ = false;
  std::vector<std::thread> workers_;
};

// fn(i) for i in [0, n) on pool, or on the calling thread when pool is null (single-threaded
// callers and tests pass no pool).
inline void ParallelFor(ThreadPool* pool, int64_t n, const std::function<void(int64_t)>& fn) {
  if (pool != nullptr && n > 1) {
    pool->ParallelFor(n, fn);
  } else {
    for (int64_t i = 0; i < n; ++i) fn(i);
  }
}

// Splits [0, n) into `parts` contiguous ranges of near-equal size; range p is
// [SplitBegin(n, parts, p), SplitBegin(n, parts, p + 1)).
inline int64_t SplitBegin(int64_t n, int64_t parts, int64_t p) {
  return (n / parts) * p + std::min<int64_t>(p, n % parts);
}

// fn(begin, end) for each of the `parts` ranges SplitBegin cuts [0, n) into, in parallel as
// ParallelFor runs them. The ranges depend on n and parts only, never on the pool.
inline void ParallelForRanges(ThreadPool* pool, int64_t n, int64_t parts,
                              const std::function<void(int64_t begin, int64_t end)>& fn) {
  ParallelFor(pool, parts,
              [&](int64_t p) { fn(SplitBegin(n, parts, p), SplitBegin(n, parts, p + 1)); });
}

}  // namespace dlrm

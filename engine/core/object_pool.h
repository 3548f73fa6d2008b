// A free list of reusable objects, for scratch memory that would otherwise be allocated
// (and page-faulted in, and zero-filled) on every step: Acquire hands out an object whose
// buffers kept their capacity from an earlier use, and the lease gives it back.
//
// Thread-safe: concurrent predictions and the chunks of one step each lease their own
// object. The pool only grows to the peak number of simultaneous leases.
#pragma once

#include <memory>
#include <mutex>
#include <utility>
#include <vector>

namespace dlrm {

template <typename T>
class ObjectPool {
 public:
  class Lease {
   public:
    Lease(ObjectPool* pool, std::unique_ptr<T> object) : pool_(pool), object_(std::move(object)) {}
    Lease(Lease&&) noexcept = default;
    Lease& operator=(Lease&&) = delete;
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    ~Lease() {
      if (object_) pool_->Return(std::move(object_));
    }
    T& operator*() const { return *object_; }
    T* operator->() const { return object_.get(); }

   private:
    ObjectPool* pool_;
    std::unique_ptr<T> object_;
  };

  ObjectPool() = default;
  ObjectPool(const ObjectPool&) = delete;
  ObjectPool& operator=(const ObjectPool&) = delete;

  Lease Acquire() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!free_.empty()) {
        std::unique_ptr<T> object = std::move(free_.back());
        free_.pop_back();
        return Lease(this, std::move(object));
      }
    }
    return Lease(this, std::make_unique<T>());
  }

 private:
  void Return(std::unique_ptr<T> object) {
    std::lock_guard<std::mutex> lock(mu_);
    free_.push_back(std::move(object));
  }

  std::mutex mu_;
  std::vector<std::unique_ptr<T>> free_;
};

}  // namespace dlrm

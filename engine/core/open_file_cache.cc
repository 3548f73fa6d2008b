#include "engine/core/open_file_cache.h"

#include <fcntl.h>
#include <sys/resource.h>

#include <algorithm>
#include <cstring>

#include "engine/core/status.h"

namespace dlrm {

OpenFileCache::OpenFileCache(int64_t capacity) : capacity_(capacity) {
  DLRM_INTERNAL_CHECK(capacity >= 1);
}

int64_t OpenFileCache::DefaultCapacity() {
  struct rlimit limit;
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return 4096;
  return std::max<int64_t>(16, static_cast<int64_t>(limit.rlim_cur / 4));
}

OpenFileCache::Handle OpenFileCache::Get(uint64_t key, const std::string& path, int flags) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    const auto it = by_key_.find(key);
    if (it != by_key_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second);
      return it->second->second;
    }
  }
  // Opened outside the lock: an open of a cold file does not stall other readers.
  FileDescriptor fd(::open(path.c_str(), flags | O_CLOEXEC));
  if (!fd.is_open()) {
    const int error = errno;
    Throw(StatusCode::kIo, "file ", path, ": cannot open: ", std::strerror(error));
  }
  auto handle = std::make_shared<const FileDescriptor>(std::move(fd));
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = by_key_.find(key);
  if (it != by_key_.end()) {  // another thread opened it meanwhile: keep one
    lru_.splice(lru_.begin(), lru_, it->second);
    return it->second->second;
  }
  lru_.emplace_front(key, handle);
  by_key_[key] = lru_.begin();
  while (static_cast<int64_t>(lru_.size()) > capacity_) {
    by_key_.erase(lru_.back().first);
    lru_.pop_back();  // closed once no handle holds it
  }
  return handle;
}

void OpenFileCache::Erase(uint64_t key) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = by_key_.find(key);
  if (it == by_key_.end()) return;
  lru_.erase(it->second);
  by_key_.erase(it);
}

int64_t OpenFileCache::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int64_t>(lru_.size());
}

}  // namespace dlrm

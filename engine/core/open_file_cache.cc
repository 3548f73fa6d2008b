#include "engine/core/open_file_cache.h"

#include <fcntl.h>
#include <sys/resource.h>

#include <algorithm>
#include <cstring>

#include "engine/core/status.h"

namespace dlrm {

OpenFileCache::OpenFileCache(int64_t capacity) : capacity_(capacity) {
  DLRM_INTERNAL_CHECK(capacity >= 0);
}

int64_t OpenFileCache::DefaultCapacity() {
  struct rlimit limit;
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return 4096;
  return std::max<int64_t>(16, static_cast<int64_t>(limit.rlim_cur / 4));
}

OpenFileCache& OpenFileCache::ProcessWide() {
  static OpenFileCache* const cache = new OpenFileCache(0);  // never destroyed
  return *cache;
}

OpenFileCache::Handle OpenFileCache::FindLocked(const std::string& path) {
  const auto it = by_path_.find(path);
  if (it == by_path_.end()) return nullptr;
  lru_.splice(lru_.begin(), lru_, it->second);
  return it->second->second;
}

OpenFileCache::Handle OpenFileCache::Get(const std::string& path, int flags) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (Handle cached = FindLocked(path)) return cached;
  }
  // Opened outside the lock: an open of a cold file does not stall other readers.
  FileDescriptor fd(::open(path.c_str(), flags | O_CLOEXEC));
  if (!fd.is_open()) {
    const int error = errno;
    Throw(StatusCode::kIo, "file ", path, ": cannot open: ", std::strerror(error));
  }
  auto handle = std::make_shared<const FileDescriptor>(std::move(fd));
  std::lock_guard<std::mutex> lock(mu_);
  // Another thread may have opened it meanwhile: keep one.
  if (Handle cached = FindLocked(path)) return cached;
  lru_.emplace_front(path, handle);
  by_path_[path] = lru_.begin();
  const int64_t capacity = this->capacity();
  while (static_cast<int64_t>(lru_.size()) > capacity) {
    by_path_.erase(lru_.back().first);
    lru_.pop_back();  // closed once no handle holds it
  }
  return handle;
}

void OpenFileCache::Erase(const std::string& path) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = by_path_.find(path);
  if (it == by_path_.end()) return;
  lru_.erase(it->second);
  by_path_.erase(it);
}

void OpenFileCache::EraseUnder(const std::string& dir) {
  const std::string prefix = dir + "/";
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = lru_.begin(); it != lru_.end();) {
    if (it->first.compare(0, prefix.size(), prefix) != 0) {
      ++it;
      continue;
    }
    by_path_.erase(it->first);
    it = lru_.erase(it);
  }
}

int64_t OpenFileCache::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int64_t>(lru_.size());
}

}  // namespace dlrm

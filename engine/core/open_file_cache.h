// OpenFileCache: at most `capacity` files held open, the least recently used closed first,
// as LevelDB's table cache keeps its files. A store of many files (the SSD tier's segments:
// a 200 GB table in 32 MiB segments is 6400 files, twice that with its garbage) would
// otherwise hold one descriptor per file and fail with EMFILE past the process's limit
// (RLIMIT_NOFILE, 1024 by default); with the cache it reopens a file it closed instead.
//
// Files are known by their paths. One cache serves the whole process (ProcessWide: every
// row store that does not ask for its own), so that several stores (the engines of a
// Spark executor's concurrent tasks) share one budget of descriptors.
//
// Ownership: owns the descriptors it holds; a handle Get returns keeps its descriptor open
// after the cache drops it, until the handle's last copy goes. ProcessWide's lives for the
// process.
// Threading: every call may run concurrently with any other (one mutex), except Erase of a
// path with a Get of it: the caller orders them (a Get that opened the file before an
// Erase would cache the old file).
// Errors: Get throws kIo naming the file and the OS's message when open() fails; the cache
// is unchanged then.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>

#include "engine/core/file_descriptor.h"

namespace dlrm {

class OpenFileCache {
 public:
  using Handle = std::shared_ptr<const FileDescriptor>;

  // capacity >= 1, or 0: DefaultCapacity() as it is whenever a file is added (a process
  // that changes its limit changes the cache's).
  explicit OpenFileCache(int64_t capacity);
  OpenFileCache(const OpenFileCache&) = delete;
  OpenFileCache& operator=(const OpenFileCache&) = delete;

  // A quarter of the process's soft RLIMIT_NOFILE, at least 16: room is left for sockets,
  // checkpoints and the caller's own files.
  static int64_t DefaultCapacity();
  // The process's cache (capacity 0: DefaultCapacity()).
  static OpenFileCache& ProcessWide();

  // `path`'s descriptor: the cached one, else `path` opened with `flags` (O_CLOEXEC added)
  // and cached, closing the least recently used beyond capacity.
  Handle Get(const std::string& path, int flags);
  // Forgets `path`'s descriptor (call before removing or replacing the file).
  void Erase(const std::string& path);
  // Forgets the descriptors of every file below directory `dir` (a store that closes).
  void EraseUnder(const std::string& dir);

  int64_t capacity() const { return capacity_ > 0 ? capacity_ : DefaultCapacity(); }
  // Files held open by the cache now (handles given out may hold more).
  int64_t size() const;

 private:
  using Lru = std::list<std::pair<std::string, Handle>>;  // most recent first
  // The cached handle of path, made the most recent; null if none. Holds mu_.
  Handle FindLocked(const std::string& path);

  const int64_t capacity_;
  mutable std::mutex mu_;
  Lru lru_;
  std::unordered_map<std::string, Lru::iterator> by_path_;
};

}  // namespace dlrm

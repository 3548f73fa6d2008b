// OpenFileCache: at most `capacity` files held open, the least recently used closed first,
// as LevelDB's table cache keeps its files. A store of many files (the SSD tier's segments:
// a 200 GB table in 32 MiB segments is 6400 files, twice that with its garbage) would
// otherwise hold one descriptor per file and fail with EMFILE past the process's limit
// (RLIMIT_NOFILE, 1024 by default); with the cache it reopens a file it closed instead.
//
// Ownership: owns the descriptors it holds; a handle Get returns keeps its descriptor open
// after the cache drops it, until the handle's last copy goes.
// Threading: every call may run concurrently with any other (one mutex), except Erase with
// a Get of the same key: the caller orders them (a Get that opened the file before an
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

  // capacity >= 1.
  explicit OpenFileCache(int64_t capacity);
  OpenFileCache(const OpenFileCache&) = delete;
  OpenFileCache& operator=(const OpenFileCache&) = delete;

  // A quarter of the process's soft RLIMIT_NOFILE, at least 16: room is left for sockets,
  // checkpoints and the caller's own files.
  static int64_t DefaultCapacity();

  // The file cached under `key`, else `path` opened with `flags` (O_CLOEXEC added) and
  // cached under `key`, closing the least recently used beyond capacity.
  Handle Get(uint64_t key, const std::string& path, int flags);
  // Forgets `key`'s file (call before removing or replacing the file it names).
  void Erase(uint64_t key);

  int64_t capacity() const { return capacity_; }
  // Files held open by the cache now (handles given out may hold more).
  int64_t size() const;

 private:
  using Lru = std::list<std::pair<uint64_t, Handle>>;  // most recent first

  const int64_t capacity_;
  mutable std::mutex mu_;
  Lru lru_;
  std::unordered_map<uint64_t, Lru::iterator> by_key_;
};

}  // namespace dlrm

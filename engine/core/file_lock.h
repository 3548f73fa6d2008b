// FileLock: an advisory lock (flock) on a file, held while the object lives: an exclusive
// holder of a path runs alone, shared holders together. Between processes, and objects of
// one process too (each lock opens the file anew, and flock locks belong to the open file).
//
// Ownership: owns the lock file's descriptor; creates the file if missing (where it can)
// and leaves it in place (it holds nothing). Threading: the constructor blocks until the lock is
// free. Errors: kIo naming the path and the OS error.
#pragma once

#include <fcntl.h>
#include <sys/file.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "engine/core/file_descriptor.h"
#include "engine/core/status.h"

namespace dlrm {

class FileLock {
 public:
  enum Kind { kExclusive = LOCK_EX, kShared = LOCK_SH };
  // A shared lock where the file can be neither created nor written (a read-only
  // directory, where no exclusive holder can be either) is taken on the file as it is, or
  // not at all when there is none.
  FileLock(const std::string& path, Kind kind)
      : fd_(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644)) {
    if (!fd_.is_open() && kind == kShared && (errno == EROFS || errno == EACCES)) {
      fd_ = FileDescriptor(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
      if (!fd_.is_open() && errno == ENOENT) return;
    }
    if (!fd_.is_open())
      Throw(StatusCode::kIo, "cannot open lock file ", path, ": ", std::strerror(errno));
    while (::flock(fd_.get(), kind) != 0)
      if (errno != EINTR) Throw(StatusCode::kIo, "cannot lock ", path, ": ", std::strerror(errno));
  }

 private:
  FileDescriptor fd_;  // closing it releases the lock
};

}  // namespace dlrm

// FileDescriptor: an open POSIX file descriptor that closes itself, the one owner of an fd
// in the engine (checkpoint files, the SSD tier's segments and indexes).
//
// Ownership: owns the fd it was given (-1: none); movable, not copyable. Threading: as an
// int; get() may be called concurrently, the rest by the owner only. Errors: none thrown;
// Close() returns close()'s errno for the owner that must see a write's late failure.
#pragma once

#include <unistd.h>

#include <cerrno>
#include <utility>

namespace dlrm {

class FileDescriptor {
 public:
  FileDescriptor() = default;
  explicit FileDescriptor(int fd) : fd_(fd) {}
  FileDescriptor(FileDescriptor&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  FileDescriptor& operator=(FileDescriptor&& other) noexcept {
    std::swap(fd_, other.fd_);
    return *this;
  }
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  ~FileDescriptor() {
    if (fd_ >= 0) ::close(fd_);
  }

  int get() const { return fd_; }
  bool is_open() const { return fd_ >= 0; }
  // Closes now; 0 or close()'s errno.
  int Close() {
    const int rc = fd_ >= 0 ? ::close(fd_) : 0;
    fd_ = -1;
    return rc == 0 ? 0 : errno;
  }

 private:
  int fd_ = -1;
};

}  // namespace dlrm

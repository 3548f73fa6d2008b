#include "engine/net/event_fd.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>

#include "engine/core/status.h"

namespace dlrm::net {

EventFd::EventFd() : fd_(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {
  if (fd_ < 0) Throw(StatusCode::kNetwork, "eventfd: ", std::strerror(errno));
}

EventFd::~EventFd() { close(fd_); }

void EventFd::Signal() {
  const uint64_t one = 1;
  // Fails only when the counter would overflow, and then the fd is readable anyway.
  while (write(fd_, &one, sizeof one) < 0 && errno == EINTR) {
  }
}

void EventFd::Drain() {
  uint64_t value;
  while (read(fd_, &value, sizeof value) < 0 && errno == EINTR) {
  }
}

}  // namespace dlrm::net

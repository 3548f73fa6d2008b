// A Linux eventfd: lets other threads wake a thread blocked in zmq_poll, which can wait
// on plain file descriptors beside ZeroMQ sockets.
#pragma once

namespace dlrm::net {

class EventFd {
 public:
  EventFd();  // kNetwork if the kernel refuses
  ~EventFd();
  EventFd(const EventFd&) = delete;
  EventFd& operator=(const EventFd&) = delete;

  int fd() const { return fd_; }
  void Signal();  // makes fd() readable
  void Drain();   // makes it unreadable again

 private:
  int fd_;
};

}  // namespace dlrm::net

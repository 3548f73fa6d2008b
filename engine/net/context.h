// The ZeroMQ context of a process (or of a test): create one and hand it to every
// endpoint. Copies share it; ZeroMQ's context is thread-safe. The context is terminated
// when the last copy and the last socket made from it are gone, so destruction order
// between endpoints and the Context object does not matter.
#pragma once

#include <memory>

namespace dlrm::net {

class Context {
 public:
  // kNetwork if ZeroMQ cannot create a context.
  Context();

  // The zmq context (void* in ZeroMQ's C API), kept alive by the returned pointer.
  std::shared_ptr<void> handle() const { return ctx_; }

 private:
  std::shared_ptr<void> ctx_;
};

}  // namespace dlrm::net

// Writing to a socket whose peer has gone raises SIGPIPE, whose default action kills the
// process: a library must never let a peer that left kill its host. Code that writes
// through a library which does not pass MSG_NOSIGNAL (Gloo's TCP transport) runs inside a
// ScopedSigpipeBlock: SIGPIPE is blocked on the calling thread for the scope, so the write
// fails with EPIPE instead, and threads started inside the scope inherit the blocked mask
// for good. A SIGPIPE raised on this thread meanwhile is discarded when the scope ends,
// unless the thread had SIGPIPE blocked already (then it is the caller's to handle).
//
// Threading: per thread (signal masks are). Errors: none (the calls cannot fail here).
#pragma once

#include <signal.h>

namespace dlrm {

class ScopedSigpipeBlock {
 public:
  ScopedSigpipeBlock();
  ~ScopedSigpipeBlock();
  ScopedSigpipeBlock(const ScopedSigpipeBlock&) = delete;
  ScopedSigpipeBlock& operator=(const ScopedSigpipeBlock&) = delete;

 private:
  sigset_t pipe_, old_;
};

}  // namespace dlrm

#include "engine/core/sigpipe.h"

#include <pthread.h>

#include <ctime>

namespace dlrm {

ScopedSigpipeBlock::ScopedSigpipeBlock() {
  sigemptyset(&pipe_);
  sigaddset(&pipe_, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe_, &old_);
}

ScopedSigpipeBlock::~ScopedSigpipeBlock() {
  if (sigismember(&old_, SIGPIPE) == 0) {
    const timespec now{0, 0};
    while (sigtimedwait(&pipe_, nullptr, &now) == SIGPIPE) {
    }
  }
  pthread_sigmask(SIG_SETMASK, &old_, nullptr);
}

}  // namespace dlrm

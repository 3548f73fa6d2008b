// ScopedSigpipeBlock (engine/core/sigpipe.h): a write to a socket whose peer has gone fails
// with EPIPE inside the scope instead of killing the process, threads started inside
// keep SIGPIPE blocked, and the scope leaves no pending SIGPIPE and the old mask behind
// (or the caller's own pending SIGPIPE, when the caller had it blocked).
#include "engine/core/sigpipe.h"

#include <gtest/gtest.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <thread>

namespace dlrm {
namespace {

// A connected socket whose peer has closed; the caller closes it.
int SocketWithoutPeer() {
  int fds[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, fds) != 0) return -1;
  close(fds[1]);
  return fds[0];
}

bool Blocked(int signal) {
  sigset_t now;
  pthread_sigmask(SIG_BLOCK, nullptr, &now);
  return sigismember(&now, signal) == 1;
}

bool Pending(int signal) {
  sigset_t pending;
  sigpending(&pending);
  return sigismember(&pending, signal) == 1;
}

TEST(SigpipeTest, WithoutTheScopeAWriteToAPeerThatLeftKillsTheProcess) {
  EXPECT_EXIT(
      {
        const int fd = SocketWithoutPeer();
        (void)!write(fd, "x", 1);
        std::_Exit(0);
      },
      ::testing::KilledBySignal(SIGPIPE), "");
}

TEST(SigpipeTest, InsideTheScopeTheWriteFailsWithEpipeAndNothingIsLeftBehind) {
  const int fd = SocketWithoutPeer();
  ASSERT_GE(fd, 0);
  ASSERT_FALSE(Blocked(SIGPIPE));
  {
    const ScopedSigpipeBlock block;
    EXPECT_TRUE(Blocked(SIGPIPE));
    errno = 0;
    EXPECT_EQ(write(fd, "x", 1), -1);
    EXPECT_EQ(errno, EPIPE);
    EXPECT_TRUE(Pending(SIGPIPE));
  }
  EXPECT_FALSE(Pending(SIGPIPE));
  EXPECT_FALSE(Blocked(SIGPIPE));
  close(fd);
}

TEST(SigpipeTest, AThreadStartedInsideKeepsSigpipeBlocked) {
  bool blocked_in_thread = false;
  std::thread started;
  {
    const ScopedSigpipeBlock block;
    started = std::thread([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));  // past the scope
      blocked_in_thread = Blocked(SIGPIPE);
    });
  }
  started.join();
  EXPECT_TRUE(blocked_in_thread);
}

TEST(SigpipeTest, ACallersOwnBlockAndPendingSignalAreLeftAlone) {
  sigset_t pipe, old;
  sigemptyset(&pipe);
  sigaddset(&pipe, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe, &old);
  const int fd = SocketWithoutPeer();
  {
    const ScopedSigpipeBlock block;
    EXPECT_EQ(write(fd, "x", 1), -1);
  }
  EXPECT_TRUE(Blocked(SIGPIPE));
  EXPECT_TRUE(Pending(SIGPIPE));  // the caller's to handle
  const timespec now{0, 0};
  EXPECT_EQ(sigtimedwait(&pipe, nullptr, &now), SIGPIPE);
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  close(fd);
}

}  // namespace
}  // namespace dlrm

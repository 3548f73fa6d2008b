// A one-way "stop waiting" signal shared by the endpoints of one member of a job (a
// trainer or a server, whether a process of its own or a thread of a host). The member's
// liveness monitor (cluster/rendezvous.h) raises it when the job cannot go on: the
// coordinator reported a peer dead, or the coordinator itself is gone. From then on every
// wait of every endpoint holding it (TransportOptions::abort) fails within
// kAbortPollInterval with the signal's code and reason, instead of running into its own
// timeout: this is how a killed process is noticed by the others in seconds (issue 17,
// finding 9).
//
// The first Raise wins; later ones are ignored. Never lowered again.
// Thread safety: every method may be called from any thread concurrently.
#pragma once

#include <atomic>
#include <chrono>
#include <mutex>
#include <string>

#include "engine/core/status.h"

namespace dlrm::net {

// How often a waiting endpoint looks at its signal.
inline constexpr std::chrono::milliseconds kAbortPollInterval{50};

class AbortSignal {
 public:
  void Raise(StatusCode code, const std::string& reason) {
    std::lock_guard<std::mutex> lock(mu_);
    if (raised_.load(std::memory_order_relaxed)) return;
    code_ = code;
    reason_ = reason;
    raised_.store(true, std::memory_order_release);
  }

  bool raised() const { return raised_.load(std::memory_order_acquire); }

  // The reason given to Raise ("" while not raised).
  std::string reason() const {
    std::lock_guard<std::mutex> lock(mu_);
    return reason_;
  }

  // Throws the raised error, `where` appended to its reason; returns if not raised.
  void ThrowIfRaised(const std::string& where) const {
    if (!raised()) return;
    std::lock_guard<std::mutex> lock(mu_);
    Throw(code_, reason_, where);
  }

 private:
  std::atomic<bool> raised_{false};
  mutable std::mutex mu_;
  StatusCode code_ = StatusCode::kOk;
  std::string reason_;
};

}  // namespace dlrm::net

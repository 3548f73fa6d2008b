// The coordinator of a multi-process job: rendezvous, then barriers.
//
// Rendezvous: every peer (server or trainer, ranks [0, world_size)) sends HELLO with its
// role, rank, world size, the address it accepts connections on and its job config
// (job_config.h). A HELLO that cannot be admitted (rank out of range or already taken,
// another world size, a job config that differs from an admitted peer's) is answered at
// once with an ERROR naming the problem (a config's differing fields) and does not
// count. When all ranks are in, each HELLO is answered with the ROSTER. A wildcard bind
// address (0.0.0.0) in a HELLO is replaced by the IP the peer's connection came from
// (roster.h).
//
// Then Serve answers BARRIER (released when all world_size peers reached the same
// generation; an ERROR if a peer has left, since it can never complete), HEARTBEAT
// (echoed) and SHUTDOWN (a peer leaving; acknowledged) until every peer has left or
// Stop() is called.
//
// Liveness (cluster_env.h): a peer that has not left and from whose connection nothing
// has come for the liveness silence (peers beat every liveness beat) is dead; a peer that
// leaves with a failure (SHUTDOWN with a Leave body) failed. From then on every HEARTBEAT
// and BARRIER is answered with an ERROR naming that peer (kNetwork for a death, kCancelled
// for a failure), so the others stop within one beat, and Serve fails the same way once
// every other peer has left. Only messages from the connection that said a rank's HELLO
// count for it.
// Once one peer has left the job is ending: a live peer that has not left within
// kLeaveTimeouts rendezvous timeouts after that is stuck (a peer that fails or is
// abandoned leaves in ~CoordinatorClient), and Serve fails naming it rather than waiting
// forever.
// The coordinator holds no training state.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "engine/cluster/cluster_env.h"
#include "engine/cluster/messages.h"
#include "engine/net/endpoint.h"

namespace dlrm::cluster {

class Coordinator {
 public:
  // Listens on `bind_address` ("tcp://127.0.0.1:5555", or port * for a free one).
  // kInvalidArgument for world_size outside [1, kMaxWorldSize]; kNetwork if the bind fails.
  Coordinator(const net::Context& context, int32_t world_size, const std::string& bind_address,
              const net::TransportOptions& options);

  // The endpoint bound (port resolved): what DLRM_COORDINATOR must point to.
  const std::string& address() const { return endpoint_.address(); }
  // How many ranks have said HELLO so far (progress reports; any thread).
  int32_t peers_registered() const { return registered_; }

  // Waits for all HELLOs and answers them with the roster, which it returns. kTimeout
  // naming the missing ranks; the peers that did say HELLO get an ERROR saying so.
  // kCancelled if Stop() is called meanwhile.
  Roster Rendezvous(std::chrono::milliseconds timeout);

  // Serves barriers until every peer has sent SHUTDOWN or died, or Stop() is called.
  // kNetwork naming a dead peer, kCancelled naming a failed one (the first); kTimeout
  // naming the peers still in the job when kLeaveTimeouts rendezvous timeouts have passed
  // since the first one left.
  // kFailedPrecondition before a successful Rendezvous.
  void Serve();
  // Makes Rendezvous or Serve return (from any thread) within about 100 ms.
  void Stop() { stop_ = true; }

 private:
  struct Joined {  // a peer's admitted HELLO
    net::Received request;
    Hello hello;
  };
  using JoinedPeers = std::vector<std::optional<Joined>>;  // by rank

  void HandleDuringRendezvous(net::Received r, JoinedPeers& joined, int32_t& count);
  // The HELLO's problem with this job (world size, rank, config), or "" when it can be
  // admitted.
  std::string AdmissionProblem(const Hello& hello, const net::Received& r,
                               const JoinedPeers& joined) const;
  // How the HELLO's job config differs from the admitted peers' (job_config.h), or "".
  std::string ConfigProblem(const Hello& hello, const JoinedPeers& joined) const;
  Roster MakeJobRoster(const JoinedPeers& joined) const;
  // The message decoded by `decode`, or nullopt after answering the sender with its ERROR.
  template <typename Decode>
  auto DecodeOrReply(const net::Received& r, Decode decode)
      -> std::optional<decltype(decode(r.message))>;
  void Handle(net::Received r);
  void HandleBarrier(net::Received r);
  void HandleShutdown(net::Received r);
  // The rank a message claims, if it is a valid one and the message came over the
  // connection that said that rank's HELLO; else answers an ERROR.
  std::optional<int32_t> SenderRank(const net::Received& r);
  void FailBarriersWaitingFor(int32_t rank, const std::string& why);
  // Notes that `r` came from its rank's own connection (a sign of life).
  void Heard(const net::Received& r);
  // Declares the peers silent for the liveness silence dead.
  void FindDeadPeers();
  [[noreturn]] void ThrowLeaveTimeout() const;
  // Records why the job cannot go on (the first reason stays: every HEARTBEAT and
  // BARRIER is answered with it from now on) and fails the barriers waiting for `rank`.
  void EndJob(int32_t rank, StatusCode code, const std::string& why);
  // Why the job cannot go on: the first dead peer ("" while none).
  const std::string& JobOver() const { return job_over_; }

  const int32_t world_size_;
  net::Endpoint endpoint_;
  std::atomic<bool> stop_{false};
  std::atomic<int32_t> registered_{0};
  std::optional<Roster> roster_;
  net::RankLinks hello_links_;  // each rank's HELLO connection, to recognize it again
  std::vector<bool> left_;
  int32_t num_left_ = 0;
  Liveness liveness_{};
  std::vector<std::chrono::steady_clock::time_point> last_heard_;  // by rank
  std::vector<bool> dead_;
  int32_t num_dead_ = 0;
  std::string job_over_;
  StatusCode job_over_code_ = StatusCode::kOk;
  std::chrono::milliseconds timeout_{0};  // the rendezvous timeout, also the leave deadline
  std::optional<std::chrono::steady_clock::time_point> first_left_;
  // Barrier generation -> the peers waiting in it, by rank.
  std::map<int64_t, std::map<int32_t, net::Received>> barriers_;
};

// DLRM_ROLE=coordinator: listens on env.CoordinatorBindEndpoint(), rendezvous within
// env.timeout_ms, then serves until every peer has left.
void RunCoordinator(const net::Context& context, const ClusterEnv& env);

}  // namespace dlrm::cluster

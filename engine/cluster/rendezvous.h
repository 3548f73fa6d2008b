// The peer side of rendezvous (servers and trainers): say HELLO to the coordinator, get
// the roster; later, barriers through the coordinator, and leave.
//
//   cluster::ClusterEnv env = cluster::ClusterEnvFromEnvironment();
//   net::Context context;
//   net::Endpoint listener(context, net::Endpoint::kListen, env.PeerBindEndpoint(),
//                          env.Transport(), "server " + std::to_string(env.rank));
//   cluster::CoordinatorClient coordinator(context, env);
//   Roster roster = coordinator.Rendezvous(listener.address());
//   ...                                   // connect to roster.peers(r).address()
//   coordinator.Barrier();
//   coordinator.Leave();
//
// A peer may start before the coordinator: ZeroMQ keeps trying to connect, and only the
// wait for the roster is bounded (env.timeout_ms, then kTimeout naming the coordinator).
//
// Liveness (cluster_env.h Liveness): from the roster on until Leave, a thread of this
// object sends the coordinator a HEARTBEAT every beat. When the coordinator answers one
// with an error (a peer has died) or does not answer within the silence (it has died),
// the thread raises the AbortSignal given to the constructor with that reason: every
// endpoint of this peer built with it in its TransportOptions stops waiting at once.
// Threads: Rendezvous, Barrier and Leave from one thread at a time.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "engine/cluster/cluster_env.h"
#include "engine/net/abort.h"
#include "engine/net/client.h"

namespace dlrm::cluster {

// What one member of a job (a server or a trainer) gives every endpoint it opens: the
// environment's options with one random routing id for all its connections (the roster
// announces it as the member's link, and listeners bind the member's rank to it) and the
// abort signal its CoordinatorClient raises when the job cannot go on.
struct MemberTransport {
  std::shared_ptr<net::AbortSignal> abort;
  net::TransportOptions options;  // options.abort == abort
};
MemberTransport MakeMemberTransport(const ClusterEnv& env);

class CoordinatorClient {
 public:
  // kInvalidArgument if env.role is the coordinator's. `member`: the transport of the
  // member this client belongs to (its routing id says HELLO; its abort signal is raised
  // when the job cannot go on); the member's other endpoints should use it too.
  CoordinatorClient(const net::Context& context, const ClusterEnv& env,
                    const MemberTransport& member);
  // A member of its own (tests).
  CoordinatorClient(const net::Context& context, const ClusterEnv& env)
      : CoordinatorClient(context, env, MakeMemberTransport(env)) {}
  // A peer that joined and did not leave (it failed, or its host abandoned it) leaves now
  // as failed (LeaveFailed), best effort, so the coordinator ends the job at once instead
  // of waiting for it.
  ~CoordinatorClient();
  CoordinatorClient(const CoordinatorClient&) = delete;
  CoordinatorClient& operator=(const CoordinatorClient&) = delete;

  // HELLO with `address` (where this peer accepts connections; empty if nowhere) and
  // `job_config` (JobConfigOf this peer's config; empty: not compared), then the roster.
  // The coordinator's ERROR (e.g. rank already taken, a config that differs from an
  // admitted peer's) is thrown with its code and text; kTimeout after env.timeout_ms if
  // the coordinator does not answer.
  Roster Rendezvous(const std::string& address, const std::string& job_config = "");

  // Returns when every peer has entered the same barrier (the k-th call of each peer
  // meets the k-th call of the others). kTimeout after env.timeout_ms or `timeout`;
  // kFailedPrecondition if a peer has left.
  void Barrier();
  void Barrier(std::chrono::milliseconds timeout);

  // Tells the coordinator this peer is done (SHUTDOWN) and waits for its acknowledgment
  // (at most the liveness silence). kNetwork without trying when the coordinator is gone.
  void Leave();
  // Leaves because this peer failed with `failure`: the coordinator tells every other
  // peer at once (their waits end naming this peer and the failure). Best effort: logs
  // instead of throwing. The destructor does it for a peer that joined and never left.
  void LeaveFailed(const std::string& failure);

  const std::shared_ptr<net::AbortSignal>& abort_signal() const { return abort_; }

 private:
  void StartBeating();
  void StopBeating();
  void BeatLoop();
  // One heartbeat (raising the signal when the job is over); false when the coordinator
  // is gone.
  bool Beat();
  void SendLeave(const std::string& failure);

  const ClusterEnv env_;
  const Liveness liveness_;
  const std::shared_ptr<net::AbortSignal> abort_;
  net::Client client_;
  int64_t next_barrier_ = 0;
  bool joined_ = false, left_ = false;
  std::atomic<bool> coordinator_gone_{false};
  std::mutex beat_mu_;
  std::condition_variable beat_cv_;
  bool stop_beating_ = false;  // beat_mu_
  std::thread beat_thread_;
};

}  // namespace dlrm::cluster

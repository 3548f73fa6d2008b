// The environment contract by which a launcher (Slurm, Kubernetes, mpirun, Spark barrier
// tasks, `dlrm launch`) tells a process its part in a multi-process training job.
//
//   DLRM_ROLE          coordinator | server | trainer                         (required)
//   DLRM_WORLD_SIZE    number of servers + trainers, in [1, kMaxWorldSize];
//                      the coordinator is not counted                         (required)
//   DLRM_RANK          this peer's rank in [0, DLRM_WORLD_SIZE)    (required for peers;
//                      the coordinator has no rank: if set it must still be an integer)
//   DLRM_LOCAL_RANK    this process's index among the job's processes of its role on
//                      its host, in [0, DLRM_WORLD_SIZE): the GPU of a trainer started
//                      with --device=cuda:local; `dlrm launch` sets it for trainers
//                      (optional)
//   DLRM_DEVICE        a trainer's device: cpu, cuda, cuda:N, or cuda:local (the GPU of
//                      its DLRM_LOCAL_RANK); replaces the config's device for that
//                      process, so one config serves a job whose trainers each have
//                      their own GPU (a Spark task's, Slurm's SLURM_LOCALID). Servers
//                      and the coordinator compute on the CPU and ignore it (optional)
//   DLRM_COORDINATOR   host:port of the coordinator (IPv6 as [addr]:port)    (required)
//   DLRM_BIND_ADDRESS  interface to listen on, default 127.0.0.1 (loopback only); set it
//                      (e.g. 0.0.0.0 or the host's IP) for a job that spans hosts
//   DLRM_SECRET        shared secret (>= 16 bytes) that turns on message authentication
//   DLRM_TIMEOUT_MS    how long any process waits for a peer (rendezvous, barriers,
//                      lookups, a server for a silent trainer; all-gathers wait
//                      kAllGatherTimeouts of it), default 60000
//   DLRM_NET_DELAY_MS  added one-way delay of every message sent, default 0: a stand-in
//                      for a slower network in benchmarks (TransportOptions::delay_ms)
//   DLRM_COLLECTIVE    the trainers' all-gather: builtin (default: over this transport,
//                      authenticated with DLRM_SECRET), gloo (gloo_communicator.h) or
//                      nccl (cuda/nccl_communicator.h: trainers with device.kind CUDA,
//                      bootstrapped over builtin); gloo and nccl are not authenticated,
//                      so either is refused together with DLRM_SECRET
//
// Every bad value is an error naming the variable and the value (DLRM_SECRET's value is
// never echoed, only its length). The contract is strict: a DLRM_* variable that libdlrm
// does not know (a typo such as DLRM_TIMEOUT=300 for DLRM_TIMEOUT_MS) is an error naming
// it, not a setting silently ignored (CheckKnownVariables).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "engine/cluster/cluster.pb.h"
#include "engine/config/dlrm.pb.h"
#include "engine/net/options.h"

namespace dlrm::cluster {

inline constexpr int32_t kMaxWorldSize = 1 << 16;
inline constexpr int64_t kDefaultTimeoutMs = 60000;

// Nested waits need growing patience, or the outer wait races the inner one and reports a
// symptom instead of the cause. A trainer in the all-gather outwaits a peer that is itself
// waiting one timeout on a server, so that peer's error naming the server reaches it in
// the exchange (with equal timers CI once saw "trainer 0 is late" instead). The
// coordinator, once a peer has left, outwaits the longest wait a live peer can be in.
inline constexpr int kAllGatherTimeouts = 2;
inline constexpr int kLeaveTimeouts = kAllGatherTimeouts + 1;

// Fast failure (issue 17, finding 9): a killed process is noticed by every other in
// about `silence` + `beat`, whatever DLRM_TIMEOUT_MS is. Every peer sends the coordinator
// a heartbeat every `beat` from a thread of its own (so a host that computes or pauses
// keeps beating); the coordinator takes a peer silent for `silence` for dead and answers
// every other peer's next heartbeat with an error naming it; a peer whose coordinator has
// not answered for `silence` takes the coordinator for dead. Either way the peer's
// net::AbortSignal ends all its waits. The timeout still bounds waits on live peers.
struct Liveness {
  std::chrono::milliseconds beat;
  std::chrono::milliseconds silence;
};
inline constexpr std::chrono::milliseconds kMaxSilence{3000};
inline constexpr int kBeatsPerSilence = 6;
// silence = min(kMaxSilence, timeout), beat = silence / kBeatsPerSilence.
Liveness LivenessFor(std::chrono::milliseconds timeout);

struct ClusterEnv {
  Role role = ROLE_UNSPECIFIED;
  int32_t rank = -1;        // -1 for the coordinator
  int32_t local_rank = -1;  // DLRM_LOCAL_RANK; -1 when not set
  // A trainer's device as given (cpu, cuda, cuda:N or cuda:local; WithTrainerDevice
  // resolves it), or "", and where it was given ("DLRM_DEVICE", "--device"): SetTrainerDevice.
  std::string device;
  std::string device_from;
  int32_t world_size = 0;
  std::string coordinator_host;  // as given ("10.0.0.5", "[::1]", "node-3")
  int32_t coordinator_port = 0;
  std::string bind_address = "127.0.0.1";
  std::string secret;
  int64_t timeout_ms = kDefaultTimeoutMs;
  int64_t net_delay_ms = 0;
  enum class Collective { kBuiltin, kGloo, kNccl };
  Collective collective = Collective::kBuiltin;

  // "tcp://host:port": where peers connect to the coordinator.
  std::string CoordinatorEndpoint() const;
  // "tcp://<bind_address>:<coordinator_port>": what the coordinator binds.
  std::string CoordinatorBindEndpoint() const;
  // "tcp://<bind_address>:*": what a peer binds to accept connections (a free port).
  std::string PeerBindEndpoint() const;
  // Transport options with this environment's secret.
  net::TransportOptions Transport() const;
};

// Variable name -> value, or nullopt when unset. Lets tests parse without setenv.
using EnvLookup = std::function<std::optional<std::string>(const std::string& name)>;

// kInvalidArgument naming the variable and the value for anything missing or malformed.
ClusterEnv ParseClusterEnv(const EnvLookup& lookup);
// ParseClusterEnv over this process's environment, after CheckKnownVariables on every
// DLRM_* name in it.
ClusterEnv ClusterEnvFromEnvironment();

// Every DLRM_* environment variable anything of libdlrm reads: the contract above, the
// library's own (DLRM_MAX_ISA: core/cpu_features.h) and the project's scripts, tests and
// bindings (DLRM_LIBRARY, DLRM_TEST_TMPDIR, ...), so a job started by them passes.
bool IsKnownVariable(const std::string& name);
// kInvalidArgument for the first name that starts with DLRM_ and is not known, naming it
// and the known name it most likely meant; other names are ignored.
void CheckKnownVariables(const std::vector<std::string>& names);

// DLRM_WORLD_SIZE of a job of `trainers` (>= 1) and `servers` (>= 0): their sum, for a
// launcher. kInvalidArgument naming both when either is out of range or the sum is above
// kMaxWorldSize (summed in 64 bits, so flags near 2^31 cannot wrap past the check).
int32_t JobWorldSize(int64_t trainers, int64_t servers);

// DLRM_TIMEOUT_MS alone (kDefaultTimeoutMs when unset), as ParseClusterEnv reads it: for a
// launcher that waits on its processes. kInvalidArgument like ParseClusterEnv.
int64_t ParseTimeoutMs(const EnvLookup& lookup);
// This process's environment (getenv).
EnvLookup ProcessEnvironment();
// Settings given as text instead of the environment (a host's map, through the C ABI):
// "KEY=VALUE" lines, blank lines and # comments allowed, every key a DLRM_* name set once.
// kInvalidArgument naming the line otherwise.
EnvLookup ParseClusterSettings(const std::string& text);

// Gives a trainer its own device, `name` as DLRM_DEVICE spells it (`from`: where it came
// from, "DLRM_DEVICE" or a launcher's "--device", which names it in errors): replaces
// what env holds. Every role checks the spelling (a launcher may set it for all); only a
// trainer keeps it. kInvalidArgument naming `from` and the value unless it is cpu, cuda,
// cuda:N or cuda:local.
void SetTrainerDevice(const std::string& name, const std::string& from, ClusterEnv* env);
// config with env.device in place of its device where this process is a trainer given one,
// cuda:local resolved to cuda:<DLRM_LOCAL_RANK>; unchanged otherwise. kInvalidArgument
// naming env.device_from for cuda:local without DLRM_LOCAL_RANK.
config::DlrmConfig WithTrainerDevice(const ClusterEnv& env, config::DlrmConfig config);

// "coordinator", "server", "trainer" (the DLRM_ROLE spellings).
const char* RoleName(Role role);

}  // namespace dlrm::cluster

// `dlrm launch --trainers T --servers S -- train --config ...`: a multi-process job on
// this machine. It starts a coordinator, S embedding servers (ranks 0..S-1) and T trainers
// (ranks S..S+T-1), each `dlrm` with the given command and the DLRM_* environment set,
// and waits for them. With --servers 0 the trainers own the embedding shards themselves
// (train/model_parallel_trainer.h). It is one launcher among any: the processes only read the
// environment contract (engine/cluster/cluster_env.h).
//
// When a process fails, the others are given DLRM_TIMEOUT_MS (plus a grace period) to
// notice and report it themselves, then killed (a dead peer is noticed in seconds:
// cluster_env.h Liveness, and the coordinator ends once every peer has left or died);
// the exit code is 0 only if every process succeeded.
#include <gflags/gflags.h>
#include <glog/logging.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "engine/cluster/cluster_env.h"
#include "engine/core/status.h"
#include "engine/core/stopwatch.h"
#include "tools/commands.h"

DEFINE_int32(trainers, 2, "launch: number of trainer processes");
DECLARE_int32(servers);
DEFINE_int32(coordinator_port, 0, "launch: the coordinator's port (0: a free one)");

namespace dlrm::tools {
namespace {

// A free loopback port below the kernel's ephemeral range: the job's own processes bind
// wildcard ports and open connections from that range, so one of them could otherwise
// take the coordinator's port in the moment before the coordinator binds it.
int FreeLoopbackPort() {
  int ephemeral_low = 32768, ephemeral_high = 60999;
  if (std::FILE* f = std::fopen("/proc/sys/net/ipv4/ip_local_port_range", "r")) {
    if (std::fscanf(f, "%d %d", &ephemeral_low, &ephemeral_high) != 2) ephemeral_low = 32768;
    std::fclose(f);
  }
  const int low = 10000, high = std::max(low + 1, ephemeral_low);
  const int offset = static_cast<int>(getpid()) % (high - low);
  for (int i = 0; i < high - low; ++i) {
    const int port = low + (offset + i) % (high - low);
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) Throw(StatusCode::kNetwork, "launch: socket() failed");
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<uint16_t>(port));
    const bool free = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
    close(fd);
    if (free) return port;
  }
  Throw(StatusCode::kNetwork, "launch: no free loopback port in [", low, ", ", high, ")");
}

struct Child {
  std::string name;
  pid_t pid = 0;
  bool done = false;
  int status = 0;
};

pid_t Spawn(const std::vector<std::string>& args, const std::map<std::string, std::string>& env) {
  const pid_t pid = fork();
  if (pid < 0) Throw(StatusCode::kInternal, "launch: fork failed");
  if (pid > 0) return pid;
  for (const auto& [key, value] : env) setenv(key.c_str(), value.c_str(), 1);
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  execv("/proc/self/exe", argv.data());
  std::perror("launch: exec of dlrm failed");
  _exit(127);
}

std::string Describe(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return "was killed by signal " + std::to_string(WTERMSIG(status));
  return "stopped";
}

// Starts `args` (the dlrm command line) as the job's coordinator, servers and trainers,
// each with the job's environment and its role and rank.
std::vector<Child> StartJob(const std::vector<std::string>& args, int32_t world_size, int port) {
  const std::map<std::string, std::string> common = {
      {"DLRM_WORLD_SIZE", std::to_string(world_size)},
      {"DLRM_COORDINATOR", "127.0.0.1:" + std::to_string(port)}};
  std::vector<Child> children;
  // local_rank: a trainer's index on this host (DLRM_LOCAL_RANK: its GPU for
  // --device=cuda:local); -1 for the others.
  auto start = [&](const std::string& name, const std::string& role, int32_t rank,
                   int32_t local_rank) {
    std::map<std::string, std::string> env = common;
    env["DLRM_ROLE"] = role;
    if (rank >= 0) env["DLRM_RANK"] = std::to_string(rank);
    if (local_rank >= 0) env["DLRM_LOCAL_RANK"] = std::to_string(local_rank);
    Child c;
    c.name = name;
    c.pid = Spawn(args, env);
    std::fprintf(stderr, "launch: %s is pid %d\n", name.c_str(), static_cast<int>(c.pid));
    children.push_back(c);
  };
  start("coordinator", "coordinator", -1, -1);
  for (int32_t s = 0; s < FLAGS_servers; ++s) start("server " + std::to_string(s), "server", s, -1);
  for (int32_t t = 0; t < FLAGS_trainers; ++t)
    start("trainer " + std::to_string(t), "trainer", FLAGS_servers + t, t);
  return children;
}

// Waits for every child; once one fails, the others get the job's timeout (plus 10 s) to
// notice and say why before they are killed. True if any failed.
bool WaitForJob(std::vector<Child>& children, int64_t timeout_ms) {
  bool failed = false;
  Clock::time_point kill_at = Clock::time_point::max();
  size_t running = children.size();
  while (running > 0) {
    int status = 0;
    const pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid > 0) {
      for (Child& c : children) {
        if (c.pid != pid) continue;
        c.done = true;
        c.status = status;
        --running;
        if (WIFEXITED(status) && WEXITSTATUS(status) == 0) continue;
        std::fprintf(stderr, "launch: %s (pid %d) %s\n", c.name.c_str(), pid,
                     Describe(status).c_str());
        if (!failed)
          kill_at = Clock::now() + std::chrono::milliseconds(timeout_ms) + std::chrono::seconds(10);
        failed = true;
      }
      continue;
    }
    if (Clock::now() >= kill_at) {
      for (const Child& c : children)
        if (!c.done) {
          std::fprintf(stderr, "launch: killing %s (pid %d)\n", c.name.c_str(), c.pid);
          kill(c.pid, SIGKILL);
        }
      kill_at = Clock::time_point::max();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return failed;
}

}  // namespace

int LaunchCommand(int argc, char** argv) {
  if (argc < 2)
    ThrowInvalid(
        "launch needs the command to run: dlrm launch --trainers T --servers S -- "
        "train --config ...");
  if (FLAGS_trainers < 1 || FLAGS_servers < 0)
    ThrowInvalid(
        "launch needs --trainers >= 1 and --servers >= 0 (0: the trainers own the "
        "embedding shards), got ",
        FLAGS_trainers, " and ", FLAGS_servers);
  const int32_t world_size = cluster::JobWorldSize(FLAGS_trainers, FLAGS_servers);
  const int port = FLAGS_coordinator_port > 0 ? FLAGS_coordinator_port : FreeLoopbackPort();
  std::vector<std::string> args = {"dlrm"};
  for (int i = 1; i < argc; ++i) args.push_back(argv[i]);
  const int64_t timeout_ms = cluster::ParseTimeoutMs(cluster::ProcessEnvironment());
  std::vector<Child> children = StartJob(args, world_size, port);
  return WaitForJob(children, timeout_ms) ? 1 : 0;
}

}  // namespace dlrm::tools

#include "engine/cluster/cluster_env.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdlib>
#include <map>
#include <memory>
#include <sstream>
#include <string_view>

#include "engine/config/config.h"
#include "engine/core/status.h"

namespace dlrm::cluster {
namespace {

std::optional<int64_t> ParseInt(const std::string& text) {
  if (text.empty()) return std::nullopt;
  int64_t value = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (ec != std::errc() || ptr != end) return std::nullopt;
  return value;
}

int64_t ParseIntVar(const std::string& name, const std::string& text, int64_t lo, int64_t hi,
                    const std::string& range) {
  const std::optional<int64_t> v = ParseInt(text);
  if (!v) ThrowInvalid(name, "='", text, "' is not an integer");
  if (*v < lo || *v > hi) ThrowInvalid(name, "=", *v, " is out of range ", range);
  return *v;
}

// A host name, an IPv4 address, or a bracketed IPv6 address. `wildcard_ok` admits "*".
bool ValidHost(const std::string& host, bool wildcard_ok) {
  if (host.empty() || host.size() > 253) return false;
  if (wildcard_ok && host == "*") return true;
  if (host.front() == '[') {
    if (host.size() < 3 || host.back() != ']') return false;
    for (size_t i = 1; i + 1 < host.size(); ++i) {
      const char c = host[i];
      if (!std::isxdigit(static_cast<unsigned char>(c)) && c != ':' && c != '.') return false;
    }
    return true;
  }
  for (char c : host) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-' && c != '_')
      return false;
  }
  return host.front() != '-' && host.front() != '.';
}

}  // namespace

const char* RoleName(Role role) {
  switch (role) {
    case ROLE_COORDINATOR: return "coordinator";
    case ROLE_SERVER: return "server";
    case ROLE_TRAINER: return "trainer";
    default: return "unspecified";
  }
}

std::string ClusterEnv::CoordinatorEndpoint() const {
  return "tcp://" + coordinator_host + ":" + std::to_string(coordinator_port);
}

std::string ClusterEnv::CoordinatorBindEndpoint() const {
  return "tcp://" + bind_address + ":" + std::to_string(coordinator_port);
}

std::string ClusterEnv::PeerBindEndpoint() const { return "tcp://" + bind_address + ":*"; }

Liveness LivenessFor(std::chrono::milliseconds timeout) {
  const std::chrono::milliseconds silence = std::min(kMaxSilence, timeout);
  return Liveness{std::max(std::chrono::milliseconds(1), silence / kBeatsPerSilence), silence};
}

net::TransportOptions ClusterEnv::Transport() const {
  net::TransportOptions options;
  options.secret = secret;
  options.delay_ms = net_delay_ms;
  return options;
}

namespace {

std::string Required(const EnvLookup& lookup, const std::string& name,
                     const std::string& expected) {
  std::optional<std::string> v = lookup(name);
  if (!v) ThrowInvalid(name, " is not set (expected ", expected, ")");
  return *v;
}

void ParseMembership(const EnvLookup& lookup, ClusterEnv* env) {
  const std::string role = Required(lookup, "DLRM_ROLE", "coordinator, server or trainer");
  if (role == "coordinator") {
    env->role = ROLE_COORDINATOR;
  } else if (role == "server") {
    env->role = ROLE_SERVER;
  } else if (role == "trainer") {
    env->role = ROLE_TRAINER;
  } else {
    ThrowInvalid("DLRM_ROLE='", role, "' is not one of coordinator, server, trainer");
  }
  const std::string world = Required(lookup, "DLRM_WORLD_SIZE", "the number of servers + trainers");
  env->world_size = static_cast<int32_t>(ParseIntVar("DLRM_WORLD_SIZE", world, 1, kMaxWorldSize,
                                                     "[1, " + std::to_string(kMaxWorldSize) + "]"));
  const std::optional<std::string> rank = lookup("DLRM_RANK");
  if (env->role == ROLE_COORDINATOR) {
    // Not used, but a launcher that sets it for every process must set it sanely.
    if (rank) ParseIntVar("DLRM_RANK", *rank, 0, kMaxWorldSize, "for the coordinator");
  } else {
    if (!rank) ThrowInvalid("DLRM_RANK is not set (required for DLRM_ROLE=", role, ")");
    env->rank = static_cast<int32_t>(
        ParseIntVar("DLRM_RANK", *rank, 0, env->world_size - 1,
                    "[0, DLRM_WORLD_SIZE=" + std::to_string(env->world_size) + ")"));
  }
  if (std::optional<std::string> local = lookup("DLRM_LOCAL_RANK"))
    env->local_rank = static_cast<int32_t>(
        ParseIntVar("DLRM_LOCAL_RANK", *local, 0, env->world_size - 1,
                    "[0, DLRM_WORLD_SIZE=" + std::to_string(env->world_size) + ")"));
}

void ParseAddresses(const EnvLookup& lookup, ClusterEnv* env) {
  const std::string coordinator = Required(lookup, "DLRM_COORDINATOR", "host:port");
  const size_t colon = coordinator.rfind(':');
  if (colon == std::string::npos)
    ThrowInvalid("DLRM_COORDINATOR='", coordinator, "' is not host:port");
  env->coordinator_host = coordinator.substr(0, colon);
  if (!ValidHost(env->coordinator_host, false))
    ThrowInvalid("DLRM_COORDINATOR='", coordinator, "' has an invalid host '",
                 env->coordinator_host, "' (IPv6 addresses go in brackets: [::1]:5555)");
  const std::optional<int64_t> port = ParseInt(coordinator.substr(colon + 1));
  if (!port || *port < 1 || *port > 65535)
    ThrowInvalid("DLRM_COORDINATOR='", coordinator, "' has port '", coordinator.substr(colon + 1),
                 "', not an integer in [1, 65535]");
  env->coordinator_port = static_cast<int32_t>(*port);
  if (std::optional<std::string> bind = lookup("DLRM_BIND_ADDRESS")) {
    if (!ValidHost(*bind, true))
      ThrowInvalid("DLRM_BIND_ADDRESS='", *bind,
                   "' is not a host, an IP address, [IPv6] or * (no port: ports are chosen)");
    env->bind_address = *bind;
  }
}

void ParseTransport(const EnvLookup& lookup, ClusterEnv* env) {
  if (std::optional<std::string> secret = lookup("DLRM_SECRET")) {
    if (secret->size() < net::kMinSecretBytes)
      ThrowInvalid("DLRM_SECRET is set but has ", secret->size(), " bytes, fewer than ",
                   net::kMinSecretBytes, " (value not shown)");
    env->secret = *secret;
  }
  env->timeout_ms = ParseTimeoutMs(lookup);
  if (std::optional<std::string> delay = lookup("DLRM_NET_DELAY_MS"))
    env->net_delay_ms = ParseIntVar("DLRM_NET_DELAY_MS", *delay, 0, 60000, "[0, 60000]");
  if (std::optional<std::string> collective = lookup("DLRM_COLLECTIVE")) {
    if (*collective == "gloo") {
      env->collective = ClusterEnv::Collective::kGloo;
    } else if (*collective == "nccl") {
      env->collective = ClusterEnv::Collective::kNccl;
    } else if (*collective != "builtin") {
      ThrowInvalid("DLRM_COLLECTIVE='", *collective, "' is not builtin, gloo or nccl");
    }
    if (env->collective != ClusterEnv::Collective::kBuiltin && !env->secret.empty())
      ThrowInvalid("DLRM_COLLECTIVE=", *collective,
                   " cannot be used with DLRM_SECRET: its connections are not authenticated "
                   "(use DLRM_COLLECTIVE=builtin)");
  }
}

}  // namespace

int32_t JobWorldSize(int64_t trainers, int64_t servers) {
  if (trainers < 1 || servers < 0)
    ThrowInvalid("a job needs trainers >= 1 and servers >= 0 (0: the trainers own the ",
                 "embedding shards), got ", trainers, " and ", servers);
  if (trainers > kMaxWorldSize || servers > kMaxWorldSize || trainers + servers > kMaxWorldSize)
    ThrowInvalid("a job of ", trainers, " trainers and ", servers, " servers is more than ",
                 kMaxWorldSize, " processes");
  return static_cast<int32_t>(trainers + servers);
}

int64_t ParseTimeoutMs(const EnvLookup& lookup) {
  const std::optional<std::string> timeout = lookup("DLRM_TIMEOUT_MS");
  if (!timeout) return kDefaultTimeoutMs;
  return ParseIntVar("DLRM_TIMEOUT_MS", *timeout, 1, 86400000, "[1, 86400000]");
}

namespace {

// name with cuda:local replaced by cuda:<local_rank>; kInvalidArgument naming `from` for a
// misspelled name, and for cuda:local without a local rank (-1).
std::string ResolveDeviceName(const std::string& name, int32_t local_rank,
                              const std::string& from) {
  std::string device = name;
  if (device == "cuda:local") {
    if (local_rank < 0)
      ThrowInvalid(from, "=cuda:local needs DLRM_LOCAL_RANK (this trainer's index on its host; ",
                   "dlrm launch sets it, another launcher must)");
    device = "cuda:" + std::to_string(local_rank);
  }
  config::DeviceConfig checked;
  try {
    SetDeviceByName(device, from, &checked);
  } catch (const Error&) {
    ThrowInvalid(from, " must be cpu, cuda, cuda:N or cuda:local, got '", name, "'");
  }
  return device;
}

}  // namespace

void SetTrainerDevice(const std::string& name, const std::string& from, ClusterEnv* env) {
  ResolveDeviceName(name, 0, from);  // the spelling only: cuda:local is resolved when used
  if (env->role != ROLE_TRAINER) return;
  env->device = name;
  env->device_from = from;
}

config::DlrmConfig WithTrainerDevice(const ClusterEnv& env, config::DlrmConfig config) {
  if (env.role != ROLE_TRAINER || env.device.empty()) return config;
  const std::string device = ResolveDeviceName(env.device, env.local_rank, env.device_from);
  SetDeviceByName(device, env.device_from, config.mutable_device());
  return config;
}

ClusterEnv ParseClusterEnv(const EnvLookup& lookup) {
  ClusterEnv env;
  ParseMembership(lookup, &env);
  if (std::optional<std::string> device = lookup("DLRM_DEVICE"))
    SetTrainerDevice(*device, "DLRM_DEVICE", &env);
  ParseAddresses(lookup, &env);
  ParseTransport(lookup, &env);
  return env;
}

EnvLookup ProcessEnvironment() {
  return [](const std::string& name) -> std::optional<std::string> {
    const char* v = std::getenv(name.c_str());
    if (v == nullptr) return std::nullopt;
    return std::string(v);
  };
}

EnvLookup ParseClusterSettings(const std::string& text) {
  auto vars = std::make_shared<std::map<std::string, std::string>>();
  std::istringstream lines(text);
  std::string line;
  int number = 0;
  while (std::getline(lines, line)) {
    ++number;
    if (line.empty() || line[0] == '#') continue;
    const size_t eq = line.find('=');
    if (eq == std::string::npos || eq == 0)
      ThrowInvalid("cluster line ", number, " is not KEY=VALUE: \"", line, "\"");
    const std::string key = line.substr(0, eq);
    if (key.rfind("DLRM_", 0) != 0)
      ThrowInvalid("cluster line ", number, ": \"", key, "\" is not a DLRM_* setting");
    try {
      CheckKnownVariables({key});
    } catch (const Error& e) {
      ThrowInvalid("cluster line ", number, ": ", e.what());
    }
    if (!vars->emplace(key, line.substr(eq + 1)).second)
      ThrowInvalid("cluster line ", number, ": ", key, " is set twice");
  }
  return [vars](const std::string& name) -> std::optional<std::string> {
    const auto it = vars->find(name);
    if (it == vars->end()) return std::nullopt;
    return it->second;
  };
}

namespace {

// The contract's variables (cluster_env.h), then the others libdlrm and its scripts read.
constexpr const char* kKnownVariables[] = {
    "DLRM_ROLE", "DLRM_WORLD_SIZE", "DLRM_RANK", "DLRM_LOCAL_RANK", "DLRM_DEVICE",
    "DLRM_COORDINATOR", "DLRM_BIND_ADDRESS", "DLRM_SECRET", "DLRM_TIMEOUT_MS", "DLRM_NET_DELAY_MS",
    "DLRM_COLLECTIVE",
    // engine/core/cpu_features.h
    "DLRM_MAX_ISA",
    // bindings (the library to load), scripts/*.sh, tests and benchmarks
    "DLRM_LIBRARY", "DLRM_CLI", "DLRM_JOBS", "DLRM_ROOT", "DLRM_BUILD_DIR", "DLRM_GPU_BUILD_DIR",
    "DLRM_TEST_TMPDIR", "DLRM_TEST_MODEL", "DLRM_TEST_SSD_CHILD", "DLRM_TEST_FSYNC_SHIM",
    "DLRM_TEST_FAIL_FSYNC_DIR", "DLRM_TEST_SMALL_ALTSTACK", "DLRM_CROSSLANG_DIR",
    "DLRM_SKIP_SANITIZER", "DLRM_BENCH_DATA", "DLRM_BENCH_CONFIG_DIR", "DLRM_DEMO_DIR",
    "DLRM_DEMO_TRAIN", "DLRM_DEMO_TEST"};

// Edits (insert, delete, substitute) from a to b.
size_t EditDistance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t substitute = diagonal + (a[i - 1] == b[j - 1] ? 0 : 1);
      diagonal = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, substitute});
    }
  }
  return row[b.size()];
}

std::string ClosestKnown(const std::string& name) {
  std::string best;
  size_t best_distance = SIZE_MAX;
  for (const char* known : kKnownVariables) {
    const std::string k = known;
    const size_t d = k.rfind(name, 0) == 0 ? 0 : EditDistance(name, k);  // a prefix: d 0
    if (d < best_distance) best = k, best_distance = d;
  }
  return best;
}

}  // namespace

bool IsKnownVariable(const std::string& name) {
  for (const char* known : kKnownVariables)
    if (name == known) return true;
  return false;
}

void CheckKnownVariables(const std::vector<std::string>& names) {
  for (const std::string& name : names) {
    if (name.rfind("DLRM_", 0) != 0 || IsKnownVariable(name)) continue;
    ThrowInvalid("environment variable ", name, " is not a libdlrm setting (did you mean ",
                 ClosestKnown(name), "?); unset it or correct its name");
  }
}

ClusterEnv ClusterEnvFromEnvironment() {
  std::vector<std::string> names;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    const std::string_view text(*entry);
    names.emplace_back(text.substr(0, text.find('=')));
  }
  CheckKnownVariables(names);
  return ParseClusterEnv(ProcessEnvironment());
}

}  // namespace dlrm::cluster

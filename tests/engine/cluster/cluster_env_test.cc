// The launch environment contract (DLRM_ROLE, DLRM_RANK, ...): valid settings parse,
// every bad value is rejected naming the variable and the value.
#include "engine/cluster/cluster_env.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "engine/cluster/roster.h"
#include "engine/config/dlrm.pb.h"
#include "engine/core/status.h"
#include "tests/support/test_support.h"

namespace dlrm {
namespace {

using ::testing::HasSubstr;
using Vars = std::map<std::string, std::string>;

cluster::ClusterEnv Parse(const Vars& vars) {
  return cluster::ParseClusterEnv([&](const std::string& name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  });
}

Vars Trainer() {
  return {{"DLRM_ROLE", "trainer"},
          {"DLRM_RANK", "2"},
          {"DLRM_WORLD_SIZE", "4"},
          {"DLRM_COORDINATOR", "node-1.cluster:5555"}};
}

// Sets (or with nullopt removes) one variable of Trainer() and expects kInvalidArgument
// with every needle in the message.
void ExpectInvalid(const std::string& name, std::optional<std::string> value,
                   std::initializer_list<std::string> needles, Vars vars = Trainer()) {
  if (value) {
    vars[name] = *value;
  } else {
    vars.erase(name);
  }
  try {
    Parse(vars);
    ADD_FAILURE() << name << "=" << value.value_or("<unset>") << " was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), StatusCode::kInvalidArgument);
    for (const std::string& n : needles) EXPECT_THAT(e.what(), HasSubstr(n));
  }
}

// Adversarial finding 11 (issue 17): a typo'd DLRM_* variable was ignored (DLRM_TIMEOUT=300
// left the 60 s default). The contract is strict: an unknown DLRM_* name is an error naming
// it and the setting it most likely meant; other names pass, as do the scripts' variables.
TEST(DistEnvTest, AnUnknownDlrmVariableIsAnErrorNamingIt) {
  const auto message = [](const std::vector<std::string>& names) {
    try {
      cluster::CheckKnownVariables(names);
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), StatusCode::kInvalidArgument);
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_THAT(message({"PATH", "DLRM_ROLE", "DLRM_TIMEOUT"}),
              HasSubstr("DLRM_TIMEOUT is not a libdlrm setting (did you mean DLRM_TIMEOUT_MS?)"));
  EXPECT_THAT(message({"DLRM_RANKS"}), HasSubstr("did you mean DLRM_RANK?"));
  EXPECT_THAT(message({"DLRM_COORDINATER"}), HasSubstr("did you mean DLRM_COORDINATOR?"));
  EXPECT_EQ(message({"HOME", "DLRMX", "DLRM_TEST_TMPDIR", "DLRM_MAX_ISA", "DLRM_LIBRARY",
                     "DLRM_SECRET", "DLRM_NET_DELAY_MS", "DLRM_COLLECTIVE"}),
            "");
  // The C ABI's settings text is held to the same rule, naming the line.
  try {
    cluster::ParseClusterSettings("DLRM_ROLE=server\nDLRM_TIMOUT_MS=5\n");
    ADD_FAILURE() << "a typo'd setting was accepted";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("cluster line 2: environment variable DLRM_TIMOUT_MS"));
    EXPECT_THAT(e.what(), HasSubstr("did you mean DLRM_TIMEOUT_MS?"));
  }
}

TEST(DistEnvTest, ParsesAPeerWithDefaults) {
  const cluster::ClusterEnv env = Parse(Trainer());
  EXPECT_EQ(env.role, cluster::ROLE_TRAINER);
  EXPECT_EQ(env.rank, 2);
  EXPECT_EQ(env.world_size, 4);
  EXPECT_EQ(env.CoordinatorEndpoint(), "tcp://node-1.cluster:5555");
  EXPECT_EQ(env.bind_address, "127.0.0.1");
  EXPECT_EQ(env.PeerBindEndpoint(), "tcp://127.0.0.1:*");
  EXPECT_EQ(env.CoordinatorBindEndpoint(), "tcp://127.0.0.1:5555");
  EXPECT_EQ(env.secret, "");
  EXPECT_EQ(env.timeout_ms, cluster::kDefaultTimeoutMs);
  EXPECT_EQ(env.Transport().secret, "");
}

TEST(DistEnvTest, ParsesEveryOptionalVariable) {
  Vars vars = Trainer();
  vars["DLRM_ROLE"] = "server";
  vars["DLRM_COORDINATOR"] = "[::1]:7000";
  vars["DLRM_BIND_ADDRESS"] = "0.0.0.0";
  vars["DLRM_SECRET"] = "a-secret-of-20-bytes";
  vars["DLRM_TIMEOUT_MS"] = "2500";
  vars["DLRM_NET_DELAY_MS"] = "2";
  const cluster::ClusterEnv env = Parse(vars);
  EXPECT_EQ(env.Transport().delay_ms, 2);
  EXPECT_EQ(env.role, cluster::ROLE_SERVER);
  EXPECT_EQ(env.CoordinatorEndpoint(), "tcp://[::1]:7000");
  EXPECT_EQ(env.CoordinatorBindEndpoint(), "tcp://0.0.0.0:7000");
  EXPECT_EQ(env.Transport().secret, "a-secret-of-20-bytes");
  EXPECT_EQ(env.timeout_ms, 2500);
}

TEST(DistEnvTest, CoordinatorNeedsNoRank) {
  Vars vars = Trainer();
  vars["DLRM_ROLE"] = "coordinator";
  vars.erase("DLRM_RANK");
  EXPECT_EQ(Parse(vars).rank, -1);
  vars["DLRM_RANK"] = "0";
  EXPECT_EQ(Parse(vars).rank, -1);
  ExpectInvalid("DLRM_RANK", "zero", {"DLRM_RANK='zero' is not an integer"}, vars);
}

TEST(DistEnvTest, RejectsRole) {
  ExpectInvalid("DLRM_ROLE", std::nullopt, {"DLRM_ROLE is not set"});
  ExpectInvalid("DLRM_ROLE", "Trainer", {"DLRM_ROLE='Trainer'", "coordinator, server, trainer"});
  ExpectInvalid("DLRM_ROLE", "", {"DLRM_ROLE=''"});
}

// A review's finding (2026-11-28): `dlrm launch --trainers 1 --servers 2147483647` summed
// the two int32 flags, which wrapped to a negative world size that passed the limit, and
// it began forking 2^31 processes.
TEST(DistEnvTest, AJobsWorldSizeIsCheckedWithoutWrapping) {
  EXPECT_EQ(cluster::JobWorldSize(2, 0), 2);
  EXPECT_EQ(cluster::JobWorldSize(1, cluster::kMaxWorldSize - 1), cluster::kMaxWorldSize);
  auto expect_refused = [](int64_t trainers, int64_t servers, const std::string& what) {
    try {
      cluster::JobWorldSize(trainers, servers);
      ADD_FAILURE() << trainers << " trainers and " << servers << " servers accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), StatusCode::kInvalidArgument);
      EXPECT_THAT(e.what(), HasSubstr(what));
    }
  };
  expect_refused(1, 2147483647, "a job of 1 trainers and 2147483647 servers is more than 65536");
  expect_refused(2147483647, 1, "a job of 2147483647 trainers and 1 servers");
  expect_refused(1, cluster::kMaxWorldSize, "more than 65536 processes");
  expect_refused(0, 1, "trainers >= 1 and servers >= 0");
  expect_refused(1, -1, "got 1 and -1");
}

TEST(DistEnvTest, RejectsWorldSize) {
  ExpectInvalid("DLRM_WORLD_SIZE", std::nullopt, {"DLRM_WORLD_SIZE is not set"});
  ExpectInvalid("DLRM_WORLD_SIZE", "four", {"DLRM_WORLD_SIZE='four' is not an integer"});
  ExpectInvalid("DLRM_WORLD_SIZE", "4x", {"DLRM_WORLD_SIZE='4x' is not an integer"});
  ExpectInvalid("DLRM_WORLD_SIZE", " 4", {"DLRM_WORLD_SIZE=' 4' is not an integer"});
  ExpectInvalid("DLRM_WORLD_SIZE", "0", {"DLRM_WORLD_SIZE=0 is out of range [1, 65536]"});
  ExpectInvalid("DLRM_WORLD_SIZE", "70000", {"DLRM_WORLD_SIZE=70000 is out of range"});
  ExpectInvalid("DLRM_WORLD_SIZE", "99999999999999999999",
                {"DLRM_WORLD_SIZE='99999999999999999999' is not an integer"});
}

TEST(DistEnvTest, RejectsRank) {
  ExpectInvalid("DLRM_RANK", std::nullopt, {"DLRM_RANK is not set", "DLRM_ROLE=trainer"});
  ExpectInvalid("DLRM_RANK", "4", {"DLRM_RANK=4 is out of range [0, DLRM_WORLD_SIZE=4)"});
  ExpectInvalid("DLRM_RANK", "-1", {"DLRM_RANK=-1 is out of range"});
  ExpectInvalid("DLRM_RANK", "1.5", {"DLRM_RANK='1.5' is not an integer"});
  ExpectInvalid("DLRM_RANK", "", {"DLRM_RANK='' is not an integer"});
}

// DLRM_LOCAL_RANK (a trainer's GPU for --device=cuda:local) is optional; when set, it is
// held to DLRM_RANK's range.
TEST(DistEnvTest, LocalRankIsOptionalAndChecked) {
  EXPECT_EQ(Parse(Trainer()).local_rank, -1);
  Vars vars = Trainer();
  vars["DLRM_LOCAL_RANK"] = "3";
  EXPECT_EQ(Parse(vars).local_rank, 3);
  ExpectInvalid("DLRM_LOCAL_RANK", "4",
                {"DLRM_LOCAL_RANK=4 is out of range [0, DLRM_WORLD_SIZE=4)"});
  ExpectInvalid("DLRM_LOCAL_RANK", "-1", {"DLRM_LOCAL_RANK=-1 is out of range"});
  ExpectInvalid("DLRM_LOCAL_RANK", "gpu0", {"DLRM_LOCAL_RANK='gpu0' is not an integer"});
}

// DLRM_DEVICE gives a trainer its own device without a config of its own (a Spark task's
// GPU): cuda:local is its DLRM_LOCAL_RANK's GPU; it replaces the config's device for
// trainers only, and a bad value is refused naming the variable in every process.
TEST(DistEnvTest, DeviceIsATrainersOwnAndCudaLocalIsItsLocalRank) {
  EXPECT_EQ(Parse(Trainer()).device, "");
  config::DlrmConfig config;
  config.mutable_device()->set_ordinal(5);
  const auto applied = [&](const cluster::ClusterEnv& env) {
    const config::DlrmConfig mine = cluster::WithTrainerDevice(env, config);
    return config::DeviceConfig::Kind_Name(mine.device().kind()) + ":" +
           std::to_string(mine.device().ordinal());
  };
  Vars vars = Trainer();
  for (const auto& [given, device] :
       {std::pair{"cpu", "CPU:0"}, {"cuda", "CUDA:0"}, {"cuda:7", "CUDA:7"}}) {
    vars["DLRM_DEVICE"] = given;
    EXPECT_EQ(applied(Parse(vars)), device) << given;
  }
  vars["DLRM_DEVICE"] = "cuda:local";
  vars["DLRM_LOCAL_RANK"] = "3";
  EXPECT_EQ(applied(Parse(vars)), "CUDA:3");

  // cuda:local without DLRM_LOCAL_RANK is refused when used, so a --device beside it can
  // still replace it (tools/distributed_train_command.cc), and is named in the error.
  Vars unranked = Trainer();
  unranked["DLRM_DEVICE"] = "cuda:local";
  cluster::ClusterEnv no_rank = Parse(unranked);
  try {
    cluster::WithTrainerDevice(no_rank, config);
    ADD_FAILURE() << "cuda:local without DLRM_LOCAL_RANK was used";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(e.what(), HasSubstr("DLRM_DEVICE=cuda:local needs DLRM_LOCAL_RANK"));
  }
  cluster::SetTrainerDevice("cuda:1", "--device", &no_rank);
  EXPECT_EQ(applied(no_rank), "CUDA:1");
  cluster::SetTrainerDevice("cuda:local", "--device", &no_rank);
  testing::ExpectError([&] { cluster::WithTrainerDevice(no_rank, config); },
                       StatusCode::kInvalidArgument, "--device=cuda:local needs DLRM_LOCAL_RANK");
  testing::ExpectError([&] { cluster::SetTrainerDevice("gpu", "--device", &no_rank); },
                       StatusCode::kInvalidArgument,
                       "--device must be cpu, cuda, cuda:N or cuda:local, got 'gpu'");
  ExpectInvalid("DLRM_DEVICE", "gpu",
                {"DLRM_DEVICE must be cpu, cuda, cuda:N or cuda:local, got 'gpu'"});
  ExpectInvalid("DLRM_DEVICE", "cuda:", {"got 'cuda:'"});
  ExpectInvalid("DLRM_DEVICE", "cuda:-1", {"got 'cuda:-1'"});
  Vars server = Trainer();
  server["DLRM_ROLE"] = "server";
  ExpectInvalid("DLRM_DEVICE", "tpu", {"DLRM_DEVICE must be"}, server);
  server["DLRM_DEVICE"] = "cuda:local";  // a launcher's setting for every process
  const cluster::ClusterEnv served = Parse(server);
  EXPECT_EQ(served.device, "");
  EXPECT_EQ(applied(served), "CPU:5");
}

TEST(DistEnvTest, RejectsCoordinator) {
  ExpectInvalid("DLRM_COORDINATOR", std::nullopt, {"DLRM_COORDINATOR is not set", "host:port"});
  ExpectInvalid("DLRM_COORDINATOR", "node-1", {"DLRM_COORDINATOR='node-1' is not host:port"});
  ExpectInvalid("DLRM_COORDINATOR", "node-1:", {"DLRM_COORDINATOR='node-1:' has port ''"});
  ExpectInvalid("DLRM_COORDINATOR", "node-1:http", {"has port 'http'"});
  ExpectInvalid("DLRM_COORDINATOR", "node-1:0", {"has port '0', not an integer in [1, 65535]"});
  ExpectInvalid("DLRM_COORDINATOR", "node-1:65536", {"has port '65536'"});
  ExpectInvalid("DLRM_COORDINATOR", ":5555", {"DLRM_COORDINATOR=':5555' has an invalid host ''"});
  ExpectInvalid("DLRM_COORDINATOR", "::1:5555", {"invalid host '::1'", "[::1]:5555"});
  ExpectInvalid("DLRM_COORDINATOR", "tcp://node-1:5555", {"invalid host 'tcp"});
  ExpectInvalid("DLRM_COORDINATOR", "node 1:5555", {"invalid host 'node 1'"});
}

TEST(DistEnvTest, RejectsBindAddress) {
  ExpectInvalid("DLRM_BIND_ADDRESS", "", {"DLRM_BIND_ADDRESS=''"});
  ExpectInvalid("DLRM_BIND_ADDRESS", "127.0.0.1:80",
                {"DLRM_BIND_ADDRESS='127.0.0.1:80'", "no port"});
  ExpectInvalid("DLRM_BIND_ADDRESS", "tcp://x", {"DLRM_BIND_ADDRESS='tcp://x'"});
  Vars vars = Trainer();
  vars["DLRM_BIND_ADDRESS"] = "*";
  EXPECT_EQ(Parse(vars).PeerBindEndpoint(), "tcp://*:*");
}

TEST(DistEnvTest, RejectsShortSecretWithoutEchoingIt) {
  ExpectInvalid("DLRM_SECRET", "hunter2", {"DLRM_SECRET is set but has 7 bytes", "not shown"});
  ExpectInvalid("DLRM_SECRET", "", {"DLRM_SECRET is set but has 0 bytes"});
  Vars vars = Trainer();
  vars["DLRM_SECRET"] = "hunter2";
  try {
    Parse(vars);
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), ::testing::Not(HasSubstr("hunter2")));
  }
}

TEST(DistEnvTest, RejectsTimeout) {
  ExpectInvalid("DLRM_TIMEOUT_MS", "0", {"DLRM_TIMEOUT_MS=0 is out of range [1, 86400000]"});
  ExpectInvalid("DLRM_TIMEOUT_MS", "-5", {"DLRM_TIMEOUT_MS=-5"});
  ExpectInvalid("DLRM_TIMEOUT_MS", "10s", {"DLRM_TIMEOUT_MS='10s' is not an integer"});
  ExpectInvalid("DLRM_NET_DELAY_MS", "-1", {"DLRM_NET_DELAY_MS=-1 is out of range [0, 60000]"});
}

TEST(DistEnvTest, CollectiveIsBuiltinGlooOrNcclWithoutASecret) {
  EXPECT_EQ(Parse(Trainer()).collective, cluster::ClusterEnv::Collective::kBuiltin);
  Vars vars = Trainer();
  vars["DLRM_COLLECTIVE"] = "gloo";
  EXPECT_EQ(Parse(vars).collective, cluster::ClusterEnv::Collective::kGloo);
  vars["DLRM_COLLECTIVE"] = "nccl";
  EXPECT_EQ(Parse(vars).collective, cluster::ClusterEnv::Collective::kNccl);
  vars["DLRM_COLLECTIVE"] = "builtin";
  EXPECT_EQ(Parse(vars).collective, cluster::ClusterEnv::Collective::kBuiltin);
  ExpectInvalid("DLRM_COLLECTIVE", "mpi", {"DLRM_COLLECTIVE='mpi' is not builtin, gloo or nccl"});
  Vars with_secret = Trainer();
  with_secret["DLRM_SECRET"] = "a-secret-of-20-bytes";
  for (const char* unauthenticated : {"gloo", "nccl"})
    ExpectInvalid("DLRM_COLLECTIVE", unauthenticated,
                  {std::string("DLRM_COLLECTIVE=") + unauthenticated, "not authenticated"},
                  with_secret);
}

TEST(DistEnvTest, EndpointHostStripsSchemePortAndBrackets) {
  EXPECT_EQ(cluster::EndpointHost("tcp://10.0.0.5:7000"), "10.0.0.5");
  EXPECT_EQ(cluster::EndpointHost("tcp://[::1]:7000"), "::1");
  EXPECT_EQ(cluster::EndpointHost("node-3:1"), "node-3");
  for (const char* bad : {"tcp://nohost", "tcp://:5", ""}) {
    try {
      cluster::EndpointHost(bad);
      ADD_FAILURE() << bad << " was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), StatusCode::kInvalidArgument) << bad;
    }
  }
}

TEST(DistEnvTest, ReadsTheProcessEnvironment) {
  // Only variables this test sets; each test runs in its own process under ctest.
  setenv("DLRM_ROLE", "server", 1);
  setenv("DLRM_RANK", "0", 1);
  setenv("DLRM_WORLD_SIZE", "1", 1);
  setenv("DLRM_COORDINATOR", "127.0.0.1:6000", 1);
  unsetenv("DLRM_SECRET");
  unsetenv("DLRM_BIND_ADDRESS");
  unsetenv("DLRM_TIMEOUT_MS");
  const cluster::ClusterEnv env = cluster::ClusterEnvFromEnvironment();
  EXPECT_EQ(env.role, cluster::ROLE_SERVER);
  EXPECT_EQ(env.CoordinatorEndpoint(), "tcp://127.0.0.1:6000");
  unsetenv("DLRM_ROLE");
  EXPECT_THROW(cluster::ClusterEnvFromEnvironment(), Error);
}

TEST(DistRosterTest, WildcardBindAddressesAreAdvertisedAsThePeersIp) {
  EXPECT_EQ(cluster::AdvertisedAddress("tcp://0.0.0.0:4000", "10.1.2.3"), "tcp://10.1.2.3:4000");
  EXPECT_EQ(cluster::AdvertisedAddress("tcp://*:4000", "10.1.2.3"), "tcp://10.1.2.3:4000");
  EXPECT_EQ(cluster::AdvertisedAddress("tcp://[::]:4000", "fe80::1"), "tcp://[fe80::1]:4000");
  EXPECT_EQ(cluster::AdvertisedAddress("tcp://127.0.0.1:4000", "10.1.2.3"), "tcp://127.0.0.1:4000");
  EXPECT_EQ(cluster::AdvertisedAddress("tcp://0.0.0.0:4000", ""), "tcp://0.0.0.0:4000");
  EXPECT_EQ(cluster::AdvertisedAddress("", "10.1.2.3"), "");
}

TEST(DistRosterTest, RanksWithRoleAndDescription) {
  cluster::Roster roster;
  roster.set_world_size(3);
  for (int r = 0; r < 3; ++r) {
    cluster::PeerInfo* p = roster.add_peers();
    p->set_rank(r);
    p->set_role(r == 1 ? cluster::ROLE_SERVER : cluster::ROLE_TRAINER);
    if (r == 1) p->set_address("tcp://h:1");
  }
  EXPECT_EQ(cluster::RanksWithRole(roster, cluster::ROLE_TRAINER), (std::vector<int32_t>{0, 2}));
  EXPECT_EQ(cluster::RanksWithRole(roster, cluster::ROLE_SERVER), (std::vector<int32_t>{1}));
  EXPECT_EQ(cluster::DescribeRoster(roster),
            "rank 0 trainer -, rank 1 server tcp://h:1, rank 2 trainer -");
}

}  // namespace
}  // namespace dlrm

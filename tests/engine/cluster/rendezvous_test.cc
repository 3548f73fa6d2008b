// Rendezvous and barriers through the coordinator, with threads as peers on loopback:
// a full job, duplicate and out-of-range ranks, a world-size mismatch, a missing
// coordinator, a coordinator that gives up on a missing peer, a peer that starts first,
// barriers that cannot complete, peers and a coordinator that die, authentication, and
// peers whose configs differ.
#include "engine/cluster/rendezvous.h"

#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "engine/cluster/coordinator.h"
#include "engine/cluster/job_config.h"
#include "engine/cluster/messages.h"
#include "engine/cluster/roster.h"
#include "engine/core/status.h"
#include "engine/net/client.h"
#include "tests/support/dist_config.h"
#include "tests/support/dist_data.h"

namespace dlrm {
namespace {

using namespace ::dlrm::testing;  // the suites' shared helpers

using std::chrono::milliseconds;
using ::testing::HasSubstr;
using Clock = std::chrono::steady_clock;

constexpr char kLoopback[] = "tcp://127.0.0.1:*";

std::string FreeLoopbackAddress() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  EXPECT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  socklen_t size = sizeof addr;
  EXPECT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &size), 0);
  close(fd);
  return "tcp://127.0.0.1:" + std::to_string(ntohs(addr.sin_port));
}

// Runs the coordinator (rendezvous + serve) on a thread; keeps what happened.
class CoordinatorThread {
 public:
  CoordinatorThread(const net::Context& context, int32_t world, milliseconds timeout,
                    const std::string& secret = "", const std::string& bind = kLoopback)
      : coordinator_(context, world, bind, Options(secret)), thread_([this, timeout] {
          try {
            roster_ = coordinator_.Rendezvous(timeout);
            coordinator_.Serve();
            served_ = true;
          } catch (const Error& e) {
            error_ = e.what();
            code_ = e.code();
          }
        }) {}
  ~CoordinatorThread() {
    coordinator_.Stop();
    Join();
  }
  const std::string& address() const { return coordinator_.address(); }
  int32_t peers_registered() const { return coordinator_.peers_registered(); }
  void Join() {
    if (thread_.joinable()) thread_.join();
  }
  std::optional<cluster::Roster> roster_;
  std::string error_;
  StatusCode code_ = StatusCode::kOk;
  std::atomic<bool> served_{false};

 private:
  static net::TransportOptions Options(const std::string& secret) {
    net::TransportOptions o;
    o.secret = secret;
    return o;
  }
  cluster::Coordinator coordinator_;
  std::thread thread_;
};

// Rank 0 of a world of 2, a server listening at tcp://127.0.0.1:1111, says HELLO (with
// `job_config`) on a thread of its own, which *roster receives; returns once the
// coordinator has admitted it, so that the next peer is the second.
std::thread JoinRankZeroFirst(const net::Context& context, const CoordinatorThread& coordinator,
                              std::optional<cluster::Roster>* roster,
                              const std::string& job_config = "") {
  std::thread first([&context, &coordinator, roster, job_config] {
    cluster::CoordinatorClient client(context,
                                      PeerEnv(coordinator.address(), cluster::ROLE_SERVER, 0, 2));
    *roster = client.Rendezvous("tcp://127.0.0.1:1111", job_config);
  });
  const auto deadline = Clock::now() + milliseconds(5000);
  while (coordinator.peers_registered() < 1 && Clock::now() < deadline)
    std::this_thread::sleep_for(milliseconds(2));
  return first;
}

TEST(DistRendezvousTest, FourPeersGetTheSameRosterThenBarrierAndLeave) {
  net::Context context;
  CoordinatorThread coordinator(context, 4, milliseconds(10000));
  std::vector<std::optional<cluster::Roster>> rosters(4);
  std::vector<std::string> listening(4);
  std::vector<std::string> errors(4);
  std::vector<std::thread> peers;
  for (int32_t rank = 0; rank < 4; ++rank) {
    peers.emplace_back([&, rank] {
      try {
        const cluster::ClusterEnv env =
            PeerEnv(coordinator.address(), rank < 2 ? cluster::ROLE_SERVER : cluster::ROLE_TRAINER,
                    rank, 4);
        std::optional<net::Endpoint> listener;
        if (env.role == cluster::ROLE_SERVER) {
          listener.emplace(context, net::Endpoint::kListen, env.PeerBindEndpoint(), env.Transport(),
                           "server " + std::to_string(rank));
          listening[rank] = listener->address();
        }
        cluster::CoordinatorClient client(context, env);
        rosters[rank] = client.Rendezvous(listening[rank]);
        client.Barrier();
        client.Barrier();
        client.Leave();
      } catch (const Error& e) {
        errors[rank] = e.what();
      }
    });
  }
  for (auto& t : peers) t.join();
  for (int32_t rank = 0; rank < 4; ++rank) {
    EXPECT_EQ(errors[rank], "") << "rank " << rank;
    ASSERT_TRUE(rosters[rank].has_value());
    EXPECT_EQ(rosters[rank]->SerializeAsString(), rosters[0]->SerializeAsString());
  }
  const cluster::Roster& roster = *rosters[0];
  ASSERT_EQ(roster.peers_size(), 4);
  EXPECT_EQ(cluster::RanksWithRole(roster, cluster::ROLE_SERVER), (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(cluster::RanksWithRole(roster, cluster::ROLE_TRAINER), (std::vector<int32_t>{2, 3}));
  EXPECT_EQ(roster.peers(0).address(), listening[0]);
  EXPECT_EQ(roster.peers(1).address(), listening[1]);
  EXPECT_EQ(roster.peers(2).address(), "");
  // Every peer left, so Serve returned by itself.
  const auto deadline = Clock::now() + milliseconds(5000);
  while (!coordinator.served_ && Clock::now() < deadline)
    std::this_thread::sleep_for(milliseconds(5));
  EXPECT_TRUE(coordinator.served_) << coordinator.error_;
}

TEST(DistRendezvousTest, BarrierHoldsUntilEveryPeerArrives) {
  net::Context context;
  CoordinatorThread coordinator(context, 2, milliseconds(10000));
  std::atomic<bool> second_arrived{false};
  std::atomic<bool> first_released_early{false};
  std::thread first([&] {
    cluster::CoordinatorClient client(context,
                                      PeerEnv(coordinator.address(), cluster::ROLE_TRAINER, 0, 2));
    client.Rendezvous("");
    client.Barrier();
    if (!second_arrived) first_released_early = true;
  });
  cluster::CoordinatorClient client(context,
                                    PeerEnv(coordinator.address(), cluster::ROLE_TRAINER, 1, 2));
  client.Rendezvous("");
  std::this_thread::sleep_for(milliseconds(100));
  second_arrived = true;
  client.Barrier();
  first.join();
  EXPECT_FALSE(first_released_early);
}

TEST(DistRendezvousTest, DuplicateRankIsRejectedAndTheJobStillForms) {
  net::Context context;
  CoordinatorThread coordinator(context, 2, milliseconds(10000));
  std::optional<cluster::Roster> roster0;
  std::thread first = JoinRankZeroFirst(context, coordinator, &roster0);
  cluster::CoordinatorClient duplicate(context,
                                       PeerEnv(coordinator.address(), cluster::ROLE_TRAINER, 0, 2));
  try {
    duplicate.Rendezvous("");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(e.what(), HasSubstr("rank 0 is already taken by a server"));
    EXPECT_THAT(e.what(), HasSubstr("tcp://127.0.0.1:1111"));
  }
  cluster::CoordinatorClient second(context,
                                    PeerEnv(coordinator.address(), cluster::ROLE_TRAINER, 1, 2));
  cluster::Roster roster1 = second.Rendezvous("");
  first.join();
  ASSERT_TRUE(roster0.has_value());
  EXPECT_EQ(roster0->SerializeAsString(), roster1.SerializeAsString());
  EXPECT_EQ(roster1.peers(0).role(), cluster::ROLE_SERVER);
}

TEST(DistRendezvousTest, OutOfRangeRankAndWrongWorldSizeAreRejected) {
  net::Context context;
  CoordinatorThread coordinator(context, 2, milliseconds(10000));
  // A peer that believes in a world of 5.
  cluster::CoordinatorClient wrong_world(
      context, PeerEnv(coordinator.address(), cluster::ROLE_TRAINER, 4, 5));
  try {
    wrong_world.Rendezvous("");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(e.what(), HasSubstr("says DLRM_WORLD_SIZE=5 but the coordinator has 2"));
  }
  // A hand-made HELLO with the right world size but a rank outside it.
  net::Client raw(context, coordinator.address(), net::TransportOptions{}, "coordinator");
  cluster::Hello hello;
  hello.set_role(cluster::ROLE_SERVER);
  hello.set_rank(7);
  hello.set_world_size(2);
  try {
    raw.Call(cluster::MakeHello(hello), milliseconds(5000));
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(e.what(), HasSubstr("HELLO rank 7 is out of range [0, 2)"));
  }
  // A peer refuses to start with a rank outside its own world.
  cluster::ClusterEnv bad = PeerEnv(coordinator.address(), cluster::ROLE_TRAINER, 2, 2);
  EXPECT_THROW(cluster::CoordinatorClient(context, bad), Error);
}

// A peer whose config is another job's (here a learning rate and the wire precision) is
// refused at rendezvous naming the fields, and the job forms without it; per-process
// fields (threads, device, memory limit, SSD directory and cache) may differ.
TEST(DistRendezvousTest, APeerWithAnotherJobsConfigIsRefusedNamingTheFields) {
  const config::DlrmConfig job =
      ShardedTestConfig(config::ShardingConfig::ROW_WISE, "sgd", "rowwise_adagrad", 1);
  config::DlrmConfig other = job;
  other.mutable_sparse_optimizer()->set_learning_rate(0.5f);
  other.mutable_distributed()->set_wire_precision(config::DistributedConfig::BF16);
  config::DlrmConfig same = job;
  same.set_num_threads(7);
  same.set_memory_limit_bytes(int64_t{1} << 30);
  same.set_ssd_dir("/elsewhere");
  same.mutable_device()->set_ordinal(1);
  same.mutable_distributed()->set_wire_precision(config::DistributedConfig::FP32);  // default
  net::Context context;
  CoordinatorThread coordinator(context, 2, milliseconds(10000));
  std::optional<cluster::Roster> roster0;
  std::thread first = JoinRankZeroFirst(context, coordinator, &roster0, cluster::JobConfigOf(job));
  cluster::CoordinatorClient refused(context,
                                     PeerEnv(coordinator.address(), cluster::ROLE_TRAINER, 1, 2));
  try {
    refused.Rendezvous("", cluster::JobConfigOf(other));
    ADD_FAILURE() << "a peer with another config joined";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(e.what(), HasSubstr("the config of trainer rank 1 differs from that of server "
                                    "rank 0"));
    EXPECT_THAT(e.what(), HasSubstr("sparse_optimizer.learning_rate: 0.05 -> 0.5"));
    EXPECT_THAT(e.what(), HasSubstr("distributed.wire_precision"));
  }
  EXPECT_EQ(coordinator.peers_registered(), 1);
  cluster::CoordinatorClient second(context,
                                    PeerEnv(coordinator.address(), cluster::ROLE_TRAINER, 1, 2));
  const cluster::Roster roster1 = second.Rendezvous("", cluster::JobConfigOf(same));
  first.join();
  ASSERT_TRUE(roster0.has_value());
  EXPECT_EQ(roster0->SerializeAsString(), roster1.SerializeAsString());
}

TEST(DistRendezvousTest, JobConfigsCompareByValue) {
  config::DlrmConfig job = ShardedTestConfig(config::ShardingConfig::ROW_WISE, "sgd", "sgd", 2);
  job.mutable_model()->mutable_tables(1)->mutable_ssd()->set_cache_bytes(1 << 20);
  config::DlrmConfig cache = job;
  cache.mutable_model()->mutable_tables(1)->mutable_ssd()->set_cache_bytes(1 << 24);
  EXPECT_EQ(cluster::JobConfigOf(cache), cluster::JobConfigOf(job));
  config::DlrmConfig dim = job;
  dim.mutable_model()->mutable_tables(0)->set_dim(16);
  EXPECT_THAT(cluster::JobConfigDifference(cluster::JobConfigOf(job), cluster::JobConfigOf(dim)),
              HasSubstr("model.tables[0].dim: 8 -> 16"));
  EXPECT_EQ(cluster::JobConfigDifference(cluster::JobConfigOf(job), cluster::JobConfigOf(job)), "");
  EXPECT_THAT(cluster::JobConfigDifference(cluster::JobConfigOf(job), "\xff\xff"),
              HasSubstr("job_config does not parse"));
}

// What the cluster's decoders refuse reaches the coordinator's loop (the transport does
// not read bodies): it answers kDataLoss naming the rule, admits nobody for it, and the
// rendezvous then completes as if nothing had happened.
TEST(DistRendezvousTest, MalformedHelloAndUnknownTypeAreAnsweredAndChangeNothing) {
  net::Context context;
  CoordinatorThread coordinator(context, 1, milliseconds(10000));
  net::Client raw(context, coordinator.address(), net::TransportOptions{}, "coordinator");
  const auto expect_error = [&](net::Message m, StatusCode code, const std::string& needle) {
    try {
      raw.Call(std::move(m), milliseconds(5000));
      ADD_FAILURE() << "answered, expected: " << needle;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), code) << e.what();
      EXPECT_THAT(e.what(), HasSubstr(needle));
    }
  };
  net::Message garbage = net::MakeMessage(cluster::HELLO);
  garbage.header.set_body("\xFF\xFF");
  expect_error(std::move(garbage), StatusCode::kDataLoss,
               "the coordinator rejected the message: HELLO body (2 bytes) is not a valid "
               "dlrm.cluster.Hello");
  cluster::Hello coordinator_role;
  coordinator_role.set_role(cluster::ROLE_COORDINATOR);
  coordinator_role.set_rank(0);
  coordinator_role.set_world_size(1);
  net::Message bad_role = net::MakeMessage(cluster::HELLO);
  net::SetBody(coordinator_role, &bad_role);
  expect_error(std::move(bad_role), StatusCode::kDataLoss,
               "HELLO role ROLE_COORDINATOR is not a peer role");
  expect_error(net::MakeMessage(42), StatusCode::kFailedPrecondition, "cannot handle TYPE_42 yet");
  EXPECT_EQ(coordinator.peers_registered(), 0);
  cluster::CoordinatorClient peer(context,
                                  PeerEnv(coordinator.address(), cluster::ROLE_TRAINER, 0, 1));
  EXPECT_EQ(peer.Rendezvous("").world_size(), 1);
}

TEST(DistRendezvousTest, MissingCoordinatorTimesOutNamingIt) {
  net::Context context;
  const std::string dead = FreeLoopbackAddress();
  cluster::CoordinatorClient client(context,
                                    PeerEnv(dead, cluster::ROLE_TRAINER, 0, 1, /*timeout_ms=*/200));
  const auto start = Clock::now();
  try {
    client.Rendezvous("");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), StatusCode::kTimeout);
    EXPECT_THAT(e.what(), HasSubstr("rendezvous of trainer rank 0 failed"));
    EXPECT_THAT(e.what(), HasSubstr("timed out after 200 ms waiting for the reply to HELLO"));
    EXPECT_THAT(e.what(), HasSubstr("coordinator at " + dead));
  }
  const double ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  EXPECT_GE(ms, 190);
  EXPECT_LT(ms, 3000);
}

TEST(DistRendezvousTest, CoordinatorGivesUpNamingMissingRanksAndTellsTheOthers) {
  net::Context context;
  CoordinatorThread coordinator(context, 3, milliseconds(300));
  cluster::CoordinatorClient client(context,
                                    PeerEnv(coordinator.address(), cluster::ROLE_SERVER, 1, 3));
  try {
    client.Rendezvous("");
    ADD_FAILURE();
  } catch (const Error& e) {
    // The coordinator's own kTimeout, delivered to this peer long before its 5 s.
    EXPECT_EQ(e.code(), StatusCode::kTimeout);
    EXPECT_THAT(e.what(), HasSubstr("1 of 3 peers said HELLO"));
    EXPECT_THAT(e.what(), HasSubstr("missing ranks 0, 2"));
  }
  coordinator.Join();
  EXPECT_EQ(coordinator.code_, StatusCode::kTimeout);
  EXPECT_THAT(coordinator.error_, HasSubstr("missing ranks 0, 2"));
}

TEST(DistRendezvousTest, PeersMayStartBeforeTheCoordinator) {
  net::Context context;
  // A free port from a plain socket, closed at once. (A ZeroMQ socket closes its listener
  // asynchronously: a peer connecting meanwhile would hand it the HELLO.)
  const std::string address = FreeLoopbackAddress();
  std::optional<cluster::Roster> roster;
  std::string error;
  std::thread peer([&] {
    try {
      cluster::CoordinatorClient client(context, PeerEnv(address, cluster::ROLE_TRAINER, 0, 1));
      roster = client.Rendezvous("");
      client.Leave();
    } catch (const Error& e) {
      error = e.what();
    }
  });
  std::this_thread::sleep_for(milliseconds(200));
  try {
    cluster::Coordinator coordinator(context, 1, address, net::TransportOptions{});
    coordinator.Rendezvous(milliseconds(5000));
    coordinator.Serve();  // returns once the peer has left
  } catch (const Error& e) {
    ADD_FAILURE() << e.what();
  }
  peer.join();
  EXPECT_EQ(error, "");
  ASSERT_TRUE(roster.has_value());
  EXPECT_EQ(roster->world_size(), 1);
}

TEST(DistRendezvousTest, BarrierFailsOnceAPeerHasLeft) {
  net::Context context;
  CoordinatorThread coordinator(context, 2, milliseconds(10000));
  std::thread leaver([&] {
    cluster::CoordinatorClient client(context,
                                      PeerEnv(coordinator.address(), cluster::ROLE_SERVER, 0, 2));
    client.Rendezvous("");
    client.Leave();
  });
  cluster::CoordinatorClient stayer(context,
                                    PeerEnv(coordinator.address(), cluster::ROLE_TRAINER, 1, 2));
  stayer.Rendezvous("");
  leaver.join();
  try {
    stayer.Barrier(milliseconds(5000));
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), StatusCode::kFailedPrecondition);
    EXPECT_THAT(e.what(), HasSubstr("barrier 0 cannot complete: rank 0 has left"));
  }
}

TEST(DistRendezvousTest, BarrierWaitingForAPeerThatLeavesFails) {
  net::Context context;
  CoordinatorThread coordinator(context, 2, milliseconds(10000));
  cluster::CoordinatorClient leaver(context,
                                    PeerEnv(coordinator.address(), cluster::ROLE_SERVER, 0, 2));
  std::thread stay([&] {
    cluster::CoordinatorClient stayer(context,
                                      PeerEnv(coordinator.address(), cluster::ROLE_TRAINER, 1, 2));
    stayer.Rendezvous("");
    try {
      stayer.Barrier(milliseconds(5000));
      ADD_FAILURE();
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), StatusCode::kFailedPrecondition);
      EXPECT_THAT(e.what(), HasSubstr("rank 0 has left"));
    }
  });
  leaver.Rendezvous("");
  std::this_thread::sleep_for(milliseconds(100));  // the other peer waits in the barrier
  leaver.Leave();
  stay.join();
}

TEST(DistRendezvousTest, CoordinatorGivesUpOnAPeerThatNeverLeavesAfterAnotherDid) {
  net::Context context;
  const auto timeout = milliseconds(1500);
  CoordinatorThread coordinator(context, 3, timeout);
  // Rank 2 joins and then hangs: it is destroyed (and would leave) only after the
  // coordinator has given up on it.
  cluster::CoordinatorClient silent(
      context, PeerEnv(coordinator.address(), cluster::ROLE_TRAINER, 2, 3, 1500));
  std::thread others([&] {
    cluster::CoordinatorClient a(context,
                                 PeerEnv(coordinator.address(), cluster::ROLE_TRAINER, 1, 3));
    a.Rendezvous("");
    a.Leave();
  });
  std::thread server([&] {
    cluster::CoordinatorClient failing(context,
                                       PeerEnv(coordinator.address(), cluster::ROLE_SERVER, 0, 3));
    failing.Rendezvous("");
    // Fails without calling Leave: its destructor leaves for it.
  });
  silent.Rendezvous("");
  const auto started = std::chrono::steady_clock::now();
  others.join();
  server.join();
  coordinator.Join();
  const auto waited = std::chrono::steady_clock::now() - started;
  EXPECT_FALSE(coordinator.served_);
  EXPECT_EQ(coordinator.code_, StatusCode::kTimeout);
  EXPECT_THAT(coordinator.error_, HasSubstr("rank(s) 2 did not leave within 4500 ms"));
  EXPECT_LT(waited, (cluster::kLeaveTimeouts + 1) * timeout);  // bounded, not waiting forever
}

// Joins as `rank` with HELLO and the roster, and then sends nothing (no heartbeats): what a
// killed process looks like to the coordinator. The returned link stays open.
std::unique_ptr<net::Client> JoinAndFallSilent(const net::Context& context,
                                               const std::string& coordinator, cluster::Role role,
                                               int32_t rank, int32_t world) {
  auto link = std::make_unique<net::Client>(context, coordinator, net::TransportOptions{},
                                            "coordinator", rank);
  cluster::Hello hello;
  hello.set_role(role);
  hello.set_rank(rank);
  hello.set_world_size(world);
  EXPECT_EQ(link->Call(cluster::MakeHello(hello), milliseconds(5000)).header.type(),
            cluster::ROSTER);
  return link;
}

// Finding 9: a peer that falls silent is taken for dead after the liveness silence, the
// other peers are told in their next heartbeat (their waits end, naming it), and the
// coordinator fails naming it once they have left.
TEST(DistRendezvousTest, APeerThatFallsSilentIsTakenForDeadAndTheOthersAreTold) {
  net::Context context;
  const auto timeout = milliseconds(1500);  // silence 1.5 s, a beat every 250 ms
  const cluster::Liveness liveness = cluster::LivenessFor(timeout);
  ASSERT_EQ(liveness.silence, timeout);
  CoordinatorThread coordinator(context, 3, timeout);  // a job's processes share the timeout
  std::unique_ptr<net::Client> dead;
  std::thread silent([&] {
    dead = JoinAndFallSilent(context, coordinator.address(), cluster::ROLE_TRAINER, 2, 3);
  });
  std::thread other([&] {
    cluster::CoordinatorClient c(
        context, PeerEnv(coordinator.address(), cluster::ROLE_SERVER, 0, 3, timeout.count()));
    c.Rendezvous("");
    while (!c.abort_signal()->raised()) std::this_thread::sleep_for(milliseconds(5));
  });
  cluster::CoordinatorClient client(
      context, PeerEnv(coordinator.address(), cluster::ROLE_SERVER, 1, 3, timeout.count()));
  client.Rendezvous("");
  const auto joined = Clock::now();
  silent.join();
  try {
    client.Barrier(milliseconds(60000));  // the dead peer never comes
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), StatusCode::kFailedPrecondition);
    EXPECT_THAT(e.what(), HasSubstr("barrier 0 cannot complete: trainer 0 (rank 2) is gone"));
  }
  while (!client.abort_signal()->raised()) std::this_thread::sleep_for(milliseconds(5));
  const auto told = Clock::now() - joined;
  EXPECT_GE(told, liveness.silence);
  EXPECT_LT(told, liveness.silence + 10 * liveness.beat);
  EXPECT_THAT(client.abort_signal()->reason(),
              HasSubstr("trainer 0 (rank 2) is gone: the coordinator has heard nothing from it "
                        "for 1500 ms"));
  other.join();  // leaves
  client.Leave();
  coordinator.Join();
  EXPECT_EQ(coordinator.code_, StatusCode::kNetwork);
  EXPECT_THAT(coordinator.error_, HasSubstr("trainer 0 (rank 2) is gone"));
}

// Finding 9: a peer that fails (here: ends without leaving) is reported to every other
// peer within a beat, with its reason, and the coordinator fails naming it.
TEST(DistRendezvousTest, APeerThatFailsIsReportedToTheOthersWithinABeat) {
  net::Context context;
  const auto timeout = milliseconds(1500);
  CoordinatorThread coordinator(context, 3, timeout);
  cluster::CoordinatorClient client(
      context, PeerEnv(coordinator.address(), cluster::ROLE_SERVER, 0, 3, timeout.count()));
  std::thread failing([&] {
    cluster::CoordinatorClient c(
        context, PeerEnv(coordinator.address(), cluster::ROLE_TRAINER, 1, 3, timeout.count()));
    c.Rendezvous("");
    c.LeaveFailed("its data file is unreadable");
  });
  std::thread abandoning([&] {
    cluster::CoordinatorClient c(
        context, PeerEnv(coordinator.address(), cluster::ROLE_TRAINER, 2, 3, timeout.count()));
    c.Rendezvous("");
    failing.join();
  });  // ends without leaving: its destructor leaves as failed
  client.Rendezvous("");
  abandoning.join();
  const auto left = Clock::now();
  while (!client.abort_signal()->raised()) std::this_thread::sleep_for(milliseconds(5));
  EXPECT_LT(Clock::now() - left, 4 * cluster::LivenessFor(timeout).beat);
  EXPECT_EQ(client.abort_signal()->reason(),
            "trainer 0 (rank 1) failed: its data file is unreadable");
  try {
    client.Barrier(milliseconds(5000));
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), StatusCode::kCancelled);
    EXPECT_THAT(e.what(), HasSubstr("trainer 0 (rank 1) failed: its data file is unreadable"));
  }
  client.Leave();
  coordinator.Join();
  EXPECT_EQ(coordinator.code_, StatusCode::kCancelled);
  EXPECT_EQ(coordinator.error_, "trainer 0 (rank 1) failed: its data file is unreadable");
}

// Finding 9: a coordinator that is gone is noticed by every peer after the silence, and
// the peer then neither waits for it nor tries to leave.
TEST(DistRendezvousTest, APeerWhoseCoordinatorIsGoneStopsAfterTheSilence) {
  net::Context context;
  const auto timeout = milliseconds(1500);
  std::optional<CoordinatorThread> coordinator;
  coordinator.emplace(context, 1, milliseconds(10000));
  const std::string address = coordinator->address();
  auto client = std::make_unique<cluster::CoordinatorClient>(
      context, PeerEnv(address, cluster::ROLE_TRAINER, 0, 1, timeout.count()));
  client->Rendezvous("");
  coordinator.reset();  // stopped and closed, as a killed process would be
  const auto gone = Clock::now();
  while (!client->abort_signal()->raised()) std::this_thread::sleep_for(milliseconds(5));
  EXPECT_LT(Clock::now() - gone, timeout + milliseconds(2000));
  EXPECT_THAT(client->abort_signal()->reason(), HasSubstr("the coordinator at " + address +
                                                          " is gone: it has not answered a "
                                                          "heartbeat for 1500 ms"));
  const auto destroyed = Clock::now();
  client.reset();
  EXPECT_LT(Clock::now() - destroyed, milliseconds(500));
}

// Acceptance 7 of issue 17: without DLRM_SECRET, a BARRIER or SHUTDOWN naming a rank
// but sent over another connection than the one that said its HELLO is refused, and the
// job goes on as if it had never been sent.
TEST(DistRendezvousTest, MessagesNamingARankFromAnotherConnectionAreRefused) {
  net::Context context;
  CoordinatorThread coordinator(context, 2, milliseconds(10000));
  std::thread other([&] {
    cluster::CoordinatorClient c(context,
                                 PeerEnv(coordinator.address(), cluster::ROLE_SERVER, 0, 2));
    c.Rendezvous("");
    c.Barrier(milliseconds(5000));
    c.Leave();
  });
  cluster::CoordinatorClient client(context,
                                    PeerEnv(coordinator.address(), cluster::ROLE_TRAINER, 1, 2));
  client.Rendezvous("");
  net::Client forger(context, coordinator.address(), net::TransportOptions{}, "coordinator", 0);
  for (net::Message m : {net::MakeMessage(cluster::SHUTDOWN), cluster::MakeBarrier(0)}) {
    try {
      forger.Call(m, milliseconds(5000));
      ADD_FAILURE() << "the coordinator obeyed a forged " << net::DescribeMessage(m);
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), StatusCode::kInvalidArgument);
      EXPECT_THAT(e.what(), HasSubstr("claims rank 0 but does not come from the connection"));
    }
  }
  client.Barrier(milliseconds(5000));  // rank 0 neither left nor entered the barrier twice
  other.join();
  client.Leave();
  coordinator.Join();
  EXPECT_EQ(coordinator.error_, "");
  EXPECT_TRUE(coordinator.served_);
}

TEST(DistRendezvousTest, RendezvousWithASharedSecret) {
  const std::string secret = "cluster-secret-0123456789";
  net::Context context;
  CoordinatorThread coordinator(context, 1, milliseconds(10000), secret);
  cluster::CoordinatorClient client(
      context, PeerEnv(coordinator.address(), cluster::ROLE_SERVER, 0, 1, 5000, secret));
  EXPECT_EQ(client.Rendezvous("tcp://127.0.0.1:2222").peers(0).address(), "tcp://127.0.0.1:2222");
  client.Leave();
}

TEST(DistRendezvousTest, RendezvousWithAWrongSecretFailsSayingWhy) {
  net::Context context;
  CoordinatorThread coordinator(context, 1, milliseconds(10000), "cluster-secret-0123456789");
  cluster::CoordinatorClient client(context, PeerEnv(coordinator.address(), cluster::ROLE_SERVER, 0,
                                                     1, 300, "another-secret-0123456789"));
  try {
    client.Rendezvous("");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), StatusCode::kTimeout);
    EXPECT_THAT(e.what(), HasSubstr("auth tag does not match"));
    EXPECT_THAT(e.what(), HasSubstr("DLRM_SECRET"));
  }
}

}  // namespace
}  // namespace dlrm

// One embedding server over a real endpoint: lookups are answered from the shards, a
// lookup whose step needs an update in flight waits for it (sync), and every bad request
// gets an ERROR naming the problem while the server keeps serving. A bad UPDATE is
// dropped and counted, and changes nothing (issue 17, finding 10), and so is any message
// that does not come over its trainer's own connection (acceptance 7).
#include "engine/ps/server.h"

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "engine/cluster/messages.h"
#include "engine/core/status.h"
#include "engine/net/client.h"
#include "engine/ps/messages.h"
#include "engine/ps/server_role.h"
#include "engine/shard/planner.h"
#include "tests/support/dist_config.h"
#include "tests/support/test_support.h"

namespace dlrm {
namespace {

using namespace ::dlrm::testing;  // the suites' shared helpers

using std::chrono::milliseconds;
constexpr milliseconds kWait(5000);

// A server whose shards, as the plan prices them, exceed the memory limit is refused before
// it allocates them, naming its bytes and the limit's source; one that fits exactly is not.
TEST(ServerMemoryTest, AServerWhoseShardsExceedTheLimitIsRefusedNamingTheBytes) {
  config::DlrmConfig config =
      ShardedTestConfig(config::ShardingConfig::TABLE_WISE, "sgd", "adagrad", 2);
  const shard::ShardingPlan plan = shard::PlanSharding(config, 2);
  const int64_t bytes = plan.servers(1).memory_bytes();
  ASSERT_GT(bytes, 0);
  config.set_memory_limit_bytes(bytes);
  ps::CheckServerFitsMemory(config, plan, 1);
  config.set_memory_limit_bytes(bytes - 1);
  const std::string needs = "server 1 needs " + std::to_string(bytes) + " bytes";
  ExpectError([&] { ps::CheckServerFitsMemory(config, plan, 1); }, StatusCode::kResourceExhausted,
              needs + " for its embedding shards");
  ExpectError([&] { ps::CheckServerFitsMemory(config, plan, 1); }, StatusCode::kResourceExhausted,
              "but memory_limit_bytes is " + std::to_string(bytes - 1) + " bytes");
}

// The server of a TABLE_WISE plan over 1 server, with one trainer.
struct ServerFixture : ::testing::Test {
  config::DlrmConfig config =
      ShardedTestConfig(config::ShardingConfig::TABLE_WISE, "sgd", "sgd", 1);
  shard::ShardingPlan plan = shard::PlanSharding(config, 1);
  ps::EmbeddingShardStore store{config, plan, 0};
  ps::ShardOwner owner{&store, 0, /*world_size=*/1, /*staleness=*/0};
  net::Context context;
  net::Endpoint listener{context, net::Endpoint::kListen, "tcp://127.0.0.1:*",
                         net::TransportOptions(), "server 0"};
  // Answers of at most 1 MiB (the transport's limit as the server is told it).
  ps::EmbeddingServer server{
      &listener,       &owner, 0, {kTrainerLink}, milliseconds(60000), config::TableConfig::FP32,
      int64_t{1} << 20};
  std::thread serving{[this] { server.Serve(); }};
  net::Client client{context, listener.address(), Linked(kTrainerLink), "server 0", 0};

  static constexpr char kTrainerLink[] = "trainer-0-link";
  static net::TransportOptions Linked(const std::string& routing_id) {
    net::TransportOptions options;
    options.routing_id = routing_id;
    return options;
  }

  ~ServerFixture() override {
    server.Stop();
    serving.join();
  }

  std::vector<ps::ShardRows> Request(int32_t shard, std::vector<int64_t> ids) {
    ps::ShardRows r;
    r.shard = shard;
    r.ids = std::move(ids);
    return {r};
  }

  // The reply to a lookup, or the error it raised.
  std::string LookupError(int64_t step, const std::vector<ps::ShardRows>& request) {
    try {
      client.Call(ps::EncodeLookup(step, request), kWait);
    } catch (const Error& e) {
      return std::string(StatusCodeName(e.code())) + ": " + e.what();
    }
    return "";
  }

  // One sample touching row 0 of every feature the server serves, gradient 1.
  std::vector<ps::FeatureUpdate> OneSample() {
    std::vector<ps::FeatureUpdate> part;
    for (const int32_t f : store.features()) {
      ps::FeatureUpdate u;
      u.feature = f;
      u.lengths = {1};
      u.ids = {0};
      const std::string& table = config.model().sparse_features(f).table();
      u.d_pooled.assign(config.model().tables(FindTable(config.model(), table)).dim(), 1.0f);
      part.push_back(u);
    }
    return part;
  }
};

TEST_F(ServerFixture, AnswersLookupsFromTheShards) {
  const net::Message reply = client.Call(ps::EncodeLookup(1, Request(0, {3, 1, 3})), kWait);
  std::vector<ps::ShardRows> answered = Request(0, {3, 1, 3});
  ps::DecodeLookupReply(reply, &answered);
  const EmbeddingTable<float>& table = store.shard_table(0);
  ASSERT_EQ(answered[0].rows.size(), 3u * table.dim());
  for (int k = 0; k < table.dim(); ++k) {
    EXPECT_EQ(answered[0].rows[k], table.row(3)[k]);
    EXPECT_EQ(answered[0].rows[table.dim() + k], table.row(1)[k]);
  }
  // A lookup for no rows (a trainer's part that reads none here, before its update) is
  // answered with none, over the wire as in process.
  std::vector<ps::ShardRows> none;
  ps::DecodeLookupReply(client.Call(ps::EncodeLookup(1, none), kWait), &none);
  EXPECT_TRUE(none.empty());
}

TEST_F(ServerFixture, SyncLookupWaitsForThePreviousStepsUpdate) {
  const float before = store.shard_table(0).row(0)[0];
  const uint64_t id = client.Submit(ps::EncodeLookup(2, Request(0, {0})));
  std::this_thread::sleep_for(milliseconds(100));  // parked: step 1 is not applied yet
  ps::UpdateMessage u;
  u.rank = 0;
  u.step = 1;
  u.lr = 0.5f;
  u.part = OneSample();
  client.endpoint().Send(ps::EncodeUpdate(u));
  std::vector<ps::ShardRows> answered = Request(0, {0});
  ps::DecodeLookupReply(client.Wait(id, kWait), &answered);
  EXPECT_NE(answered[0].rows[0], before) << "step 2's lookup saw step 1's update";
  EXPECT_EQ(answered[0].rows[0], store.shard_table(0).row(0)[0]);
  EXPECT_EQ(owner.applied(), 1);
  const net::Message ack = client.Call(ps::StepMessage(ps::FLUSH, 1), kWait);
  EXPECT_EQ(ack.header.type(), ps::FLUSH_ACK);
}

// A lookup whose answer could not travel in one message is refused before any row is read
// (it would have been read whole, then failed to send), and the server keeps serving.
TEST_F(ServerFixture, ALookupWhoseAnswerCannotTravelIsRefusedBeforeAnyRowIsRead) {
  std::vector<int64_t> ids(40000);  // 160 KB asked; 40000 rows of 8 floats = 1.28 MB answered
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int64_t>(i % 60);
  const std::string error = LookupError(1, Request(0, ids));
  EXPECT_NE(error.find("INVALID_ARGUMENT"), std::string::npos) << error;
  EXPECT_NE(error.find("more than one message may carry (1048576)"), std::string::npos) << error;
  ids.resize(30000);  // 960 KB: fits
  EXPECT_EQ(LookupError(1, Request(0, ids)), "");
}

TEST_F(ServerFixture, BadRequestsGetErrorsAndTheServerKeepsServing) {
  EXPECT_NE(LookupError(1, Request(99, {0})).find("has no shard 99"), std::string::npos);
  EXPECT_NE(LookupError(1, Request(0, {100000})).find("OUT_OF_RANGE"), std::string::npos);
  EXPECT_NE(LookupError(0, Request(0, {0})).find("steps start at 1"), std::string::npos);
  net::Message wrong = ps::EncodeLookup(1, Request(0, {0}));
  wrong.payloads[0] = net::Payload::Copy(std::vector<float>{0.0f});
  try {
    client.Call(wrong, kWait);
    ADD_FAILURE() << "a LOOKUP with an F32 shard list was answered";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), StatusCode::kDataLoss);
    EXPECT_NE(std::string(e.what()).find("LOOKUP payload 0 is F32"), std::string::npos);
  }
  net::Message barrier = cluster::MakeBarrier(0);
  try {
    client.Call(barrier, kWait);
    ADD_FAILURE() << "BARRIER was answered";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("does not handle BARRIER"), std::string::npos);
  }
  EXPECT_EQ(LookupError(1, Request(0, {1})), "") << "still serving";
}

// Finding 10: one malformed UPDATE from a rank that does not exist used to stop the
// server, and with it the job.
TEST_F(ServerFixture, BadUpdatesAreDroppedAndTheJobGoesOn) {
  const float before = store.shard_table(0).row(0)[0];
  ps::UpdateMessage u;
  u.rank = 0;
  u.step = 5;  // further ahead than staleness 0 allows
  u.lr = 0.5f;
  u.part = OneSample();
  client.endpoint().Send(ps::EncodeUpdate(u));
  net::Message no_payloads = ps::EncodeUpdate(u);
  no_payloads.header.set_sender_rank(99);
  no_payloads.payloads.clear();
  client.endpoint().Send(no_payloads);
  for (int i = 0; i < 100 && server.messages_dropped() < 2; ++i)
    std::this_thread::sleep_for(milliseconds(10));
  EXPECT_EQ(server.messages_dropped(), 2);
  // The second names a rank that is not a trainer: not its trainer's connection either.
  EXPECT_NE(server.last_drop_reason().find("from rank 99"), std::string::npos)
      << server.last_drop_reason();
  EXPECT_EQ(owner.applied(), 0);
  EXPECT_EQ(store.shard_table(0).row(0)[0], before);
  EXPECT_EQ(LookupError(1, Request(0, {0})), "") << "still serving";
  u.step = 1;  // the trainer's real update still applies
  client.endpoint().Send(ps::EncodeUpdate(u));
  const net::Message ack = client.Call(ps::StepMessage(ps::FLUSH, 1), kWait);
  EXPECT_EQ(ack.header.type(), ps::FLUSH_ACK);
  EXPECT_EQ(owner.applied(), 1);
  EXPECT_NE(store.shard_table(0).row(0)[0], before);
}

// Acceptance 7 of issue 17: without DLRM_SECRET, messages naming the trainer but sent
// over another connection (a forger's, a peer of another job) are dropped and answered
// with an error: a forged UPDATE, SAVE, SHUTDOWN or LOOKUP changes nothing.
TEST_F(ServerFixture, MessagesNotFromTheirTrainersConnectionAreDroppedAndChangeNothing) {
  const float before = store.shard_table(0).row(0)[0];
  net::Client forger{context, listener.address(), Linked("forger"), "server 0", 0};
  ps::UpdateMessage u;
  u.rank = 0;
  u.step = 1;  // exactly what the trainer would send next
  u.lr = 0.5f;
  u.part = OneSample();
  forger.endpoint().Send(ps::EncodeUpdate(u));
  net::Message save = ps::StepMessage(ps::SAVE, 0);
  const std::string forged_save = testing::TempDir("server_forged") + "/save";
  save.header.set_body(forged_save);
  for (net::Message m : {save, net::MakeMessage(cluster::SHUTDOWN), ps::StepMessage(ps::FLUSH, 0),
                         ps::EncodeLookup(1, Request(0, {0}))}) {
    try {
      forger.Call(m, kWait);
      ADD_FAILURE() << "answered a forged " << net::DescribeMessage(m);
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("not from the connection of the trainer it names"),
                std::string::npos)
          << e.what();
    }
  }
  EXPECT_EQ(server.messages_dropped(), 5);
  EXPECT_FALSE(std::filesystem::exists(forged_save));
  EXPECT_EQ(owner.applied(), 0);
  EXPECT_EQ(store.shard_table(0).row(0)[0], before);
  // The trainer's own update still applies; the server still serves it.
  client.endpoint().Send(ps::EncodeUpdate(u));
  EXPECT_EQ(client.Call(ps::StepMessage(ps::FLUSH, 1), kWait).header.type(), ps::FLUSH_ACK);
  EXPECT_EQ(owner.applied(), 1);
  EXPECT_NE(store.shard_table(0).row(0)[0], before);
}

TEST_F(ServerFixture, ShutdownFromEveryTrainerEndsServe) {
  const net::Message ack = client.Call(net::MakeMessage(cluster::SHUTDOWN), kWait);
  EXPECT_EQ(ack.header.type(), cluster::SHUTDOWN);
  serving.join();
  serving = std::thread([] {});  // the fixture joins it again
}

TEST_F(ServerFixture, OwnerRefusesPartsNoTrainerKeepingTheRuleSends) {
  auto expect_refused = [&](int32_t rank, int64_t step, const std::string& needle) {
    try {
      owner.AddUpdate(rank, step, 0.1f, OneSample());
      ADD_FAILURE() << "accepted rank " << rank << " step " << step;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), StatusCode::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_refused(1, 1, "rank 1 outside [0, 1)");
  expect_refused(-1, 1, "rank -1 outside");
  expect_refused(0, 0, "step 0 is already applied");
  expect_refused(0, 2, "more than staleness 0 + 1 steps ahead");
  EXPECT_EQ(owner.applied(), 0);
  EXPECT_EQ(LookupError(1, Request(0, {0})), "") << "a refused part does not stop the owner";
}

TEST(EmbeddingServerLiveness, ASilentTrainerEndsServeWithAnErrorNamingIt) {
  const config::DlrmConfig config =
      ShardedTestConfig(config::ShardingConfig::TABLE_WISE, "sgd", "sgd", 1);
  const shard::ShardingPlan plan = shard::PlanSharding(config, 1);
  ps::EmbeddingShardStore store(config, plan, 0);
  ps::ShardOwner owner(&store, 0, 2, 0);
  net::Context context;
  net::Endpoint listener(context, net::Endpoint::kListen, "tcp://127.0.0.1:*",
                         net::TransportOptions(), "server 0");
  ps::EmbeddingServer server(&listener, &owner, 0, {"link-0", "link-1"}, milliseconds(300));
  try {
    server.Serve();
    ADD_FAILURE() << "Serve returned although no trainer ever spoke";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), StatusCode::kTimeout);
    EXPECT_NE(std::string(e.what()).find("trainer 0 has sent nothing for 300 ms"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace dlrm

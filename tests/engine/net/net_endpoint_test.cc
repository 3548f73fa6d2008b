// Endpoints over loopback TCP: request/reply with many outstanding requests, timeouts
// that name the peer, a server that keeps serving through garbage, oversized messages,
// replies to peers that have gone, the injected propagation delay, and the abort signal.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "engine/core/status.h"
#include "engine/net/abort.h"
#include "engine/net/client.h"
#include "engine/net/endpoint.h"
#include "engine/net/zmq_socket.h"
#include "engine/ps/messages.h"

namespace dlrm::net {
namespace {

// The messages these tests pass around are the embedding service's; registered for their
// names in errors and logs.
[[maybe_unused]] const bool kTypesRegistered = (ps::RegisterMessageTypes(), true);

using std::chrono::milliseconds;
using ::testing::HasSubstr;
using ::testing::StartsWith;
using Clock = std::chrono::steady_clock;

constexpr char kLoopback[] = "tcp://127.0.0.1:*";

double MsSince(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

// A port nothing listens on: bound once, then released.
std::string DeadAddress(const Context& context) {
  ZmqSocket probe(context, ZmqSocket::kRouter, TransportOptions{});
  return probe.Bind(kLoopback);
}

// A LOOKUP server: answers each LOOKUP with the ids' negation as F32, until SHUTDOWN.
class EchoServer {
 public:
  EchoServer(const Context& context, const TransportOptions& options)
      : endpoint_(context, Endpoint::kListen, kLoopback, options, "test server"),
        thread_([this] { Run(); }) {}
  ~EchoServer() {
    stop_ = true;
    thread_.join();
  }
  Endpoint& endpoint() { return endpoint_; }
  int served() const { return served_; }

 private:
  void Run() {
    while (!stop_) {
      auto r = endpoint_.TryReceive(milliseconds(20));
      if (!r) continue;
      if (r->message.header.type() != ps::LOOKUP || r->message.payloads.size() != 1 ||
          r->message.payloads[0].dtype() != PayloadDescriptor::I64) {
        endpoint_.ReplyError(*r, StatusCode::kInvalidArgument, "only LOOKUP");
        continue;
      }
      const std::vector<int64_t> ids = r->message.payloads.at(0).ToVector<int64_t>();
      Message reply = MakeMessage(ps::LOOKUP_REPLY);
      Payload rows = Payload::Zeros<float>(static_cast<int64_t>(ids.size()));
      for (size_t i = 0; i < ids.size(); ++i)
        rows.mutable_data<float>()[i] = -static_cast<float>(ids[i]);
      reply.payloads.push_back(std::move(rows));
      endpoint_.Reply(*r, std::move(reply));
      ++served_;
    }
  }
  Endpoint endpoint_;
  std::atomic<bool> stop_{false};
  std::atomic<int> served_{0};
  std::thread thread_;
};

Message Lookup(std::vector<int64_t> ids) {
  Message m = MakeMessage(ps::LOOKUP);
  m.payloads.push_back(Payload::Copy(ids));
  return m;
}

TEST(NetEndpointTest, ListensOnAnEphemeralLoopbackPort) {
  Context context;
  Endpoint server(context, Endpoint::kListen, kLoopback, TransportOptions{}, "s");
  EXPECT_THAT(server.address(), StartsWith("tcp://127.0.0.1:"));
  EXPECT_NE(server.address(), "tcp://127.0.0.1:*");
  EXPECT_NE(server.address(), "tcp://127.0.0.1:0");
}

TEST(NetEndpointTest, BindFailureIsANetworkErrorNamingTheAddress) {
  Context context;
  Endpoint first(context, Endpoint::kListen, kLoopback, TransportOptions{}, "first");
  try {
    Endpoint second(context, Endpoint::kListen, first.address(), TransportOptions{}, "second");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), StatusCode::kNetwork);
    EXPECT_THAT(e.what(), HasSubstr(first.address()));
  }
}

TEST(NetEndpointTest, RequestReplyCarriesPayloads) {
  Context context;
  EchoServer server(context, TransportOptions{});
  Client client(context, server.endpoint().address(), TransportOptions{}, "test server", 4);
  Message reply = client.Call(Lookup({1, 2, 3}), milliseconds(5000));
  EXPECT_EQ(reply.header.type(), ps::LOOKUP_REPLY);
  EXPECT_EQ(reply.payloads.at(0).ToVector<float>(), (std::vector<float>{-1, -2, -3}));
}

TEST(NetEndpointTest, LargePayloadsTravelIntact) {
  Context context;
  EchoServer server(context, TransportOptions{});
  Client client(context, server.endpoint().address(), TransportOptions{}, "test server");
  std::vector<int64_t> ids(1 << 18);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int64_t>(i * 7);
  Message reply = client.Call(Lookup(ids), milliseconds(5000));
  const std::vector<float> rows = reply.payloads.at(0).ToVector<float>();
  ASSERT_EQ(rows.size(), ids.size());
  for (size_t i = 0; i < ids.size(); i += 997) EXPECT_EQ(rows[i], -static_cast<float>(ids[i]));
}

TEST(NetEndpointTest, ManyOutstandingRequestsAreMatchedById) {
  Context context;
  Endpoint server(context, Endpoint::kListen, kLoopback, TransportOptions{}, "server");
  Client client(context, server.address(), TransportOptions{}, "server");
  std::vector<uint64_t> ids;
  for (int64_t i = 0; i < 32; ++i) ids.push_back(client.Submit(Lookup({i})));
  // Collect all requests, then answer them in reverse order.
  std::vector<Received> requests;
  for (int i = 0; i < 32; ++i) requests.push_back(server.Receive(milliseconds(5000), "LOOKUP"));
  for (auto it = requests.rbegin(); it != requests.rend(); ++it) {
    Message reply = MakeMessage(ps::LOOKUP_REPLY);
    reply.header.set_step(it->message.payloads[0].ToVector<int64_t>()[0]);
    server.Reply(*it, std::move(reply));
  }
  for (int64_t i = 0; i < 32; ++i)
    EXPECT_EQ(client.Wait(ids[i], milliseconds(5000)).header.step(), i);
}

TEST(NetEndpointTest, SeveralThreadsWaitForTheirOwnReplies) {
  Context context;
  EchoServer server(context, TransportOptions{});
  Client client(context, server.endpoint().address(), TransportOptions{}, "test server");
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int64_t i = 0; i < 25; ++i) {
        Message reply = client.Call(Lookup({t * 1000 + i}), milliseconds(5000));
        if (reply.payloads[0].ToVector<float>()[0] == -static_cast<float>(t * 1000 + i)) ++ok;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok, 100);
}

TEST(NetEndpointTest, ErrorReplyIsThrownWithThePeersCode) {
  Context context;
  EchoServer server(context, TransportOptions{});
  Client client(context, server.endpoint().address(), TransportOptions{}, "test server");
  try {
    client.Call(MakeMessage(ps::UPDATE), milliseconds(5000));
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(e.what(), HasSubstr("test server"));
    EXPECT_THAT(e.what(), HasSubstr("answered UPDATE #1 with an error: only LOOKUP"));
  }
}

TEST(NetEndpointTest, WaitWithoutAPeerTimesOutNamingThePeerAndTheRequest) {
  Context context;
  const std::string dead = DeadAddress(context);
  Client client(context, dead, TransportOptions{}, "server 7");
  const uint64_t id = client.Submit(Lookup({1}));
  const auto start = Clock::now();
  try {
    client.Wait(id, milliseconds(150));
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), StatusCode::kTimeout);
    EXPECT_THAT(e.what(), HasSubstr("timed out after 150 ms waiting for the reply to LOOKUP #1"));
    EXPECT_THAT(e.what(), HasSubstr("from server 7 at " + dead));
  }
  EXPECT_GE(MsSince(start), 140);
  EXPECT_LT(MsSince(start), 2000);
  EXPECT_THROW(client.Wait(id, milliseconds(10)), Error);  // no longer outstanding
}

TEST(NetEndpointTest, ListenerReceiveTimesOutNamingWhatItAwaited) {
  Context context;
  Endpoint server(context, Endpoint::kListen, kLoopback, TransportOptions{}, "server 2");
  try {
    server.Receive(milliseconds(50), "a LOOKUP");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), StatusCode::kTimeout);
    EXPECT_THAT(e.what(), HasSubstr("waiting for a LOOKUP from any peer of server 2"));
    EXPECT_THAT(e.what(), HasSubstr(server.address()));
  }
  EXPECT_FALSE(server.TryReceive(milliseconds(0)).has_value());
}

// Finding 9: once a job member's signal is raised, every wait of its endpoints ends at
// once with the signal's error, waits already in progress and later ones alike.
TEST(NetEndpointTest, ARaisedAbortSignalEndsEveryWaitAtOnce) {
  Context context;
  auto abort = std::make_shared<AbortSignal>();
  TransportOptions options;
  options.abort = abort;
  const std::string dead = DeadAddress(context);
  Client client(context, dead, options, "server 7");
  Endpoint listener(context, Endpoint::kListen, kLoopback, options, "server 2");
  const uint64_t id = client.Submit(Lookup({1}));
  const auto start = Clock::now();
  std::thread raiser([&] {
    std::this_thread::sleep_for(milliseconds(100));
    abort->Raise(StatusCode::kNetwork, "trainer 1 is gone");
    abort->Raise(StatusCode::kTimeout, "a later reason");  // the first one stays
  });
  try {
    client.Wait(id, milliseconds(60000));
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), StatusCode::kNetwork);
    EXPECT_THAT(e.what(), StartsWith("trainer 1 is gone (server 7 at " + dead));
  }
  raiser.join();
  EXPECT_GE(MsSince(start), 90);
  EXPECT_LT(MsSince(start), 2000);
  for (int i = 0; i < 2; ++i) {
    try {
      if (i == 0) listener.TryReceive(milliseconds(60000));
      if (i == 1) listener.Receive(milliseconds(60000), "a LOOKUP");
      ADD_FAILURE();
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), StatusCode::kNetwork);
      EXPECT_THAT(e.what(), StartsWith("trainer 1 is gone (server 2 at "));
    }
  }
  EXPECT_LT(MsSince(start), 2000);
  EXPECT_EQ(abort->reason(), "trainer 1 is gone");
}

TEST(NetEndpointTest, SendingAnInvalidMessageFailsAtOnce) {
  Context context;
  Client client(context, DeadAddress(context), TransportOptions{}, "s");
  EXPECT_THROW(client.Submit(MakeMessage(ERROR)), Error);  // ERROR needs a code
  Endpoint server(context, Endpoint::kListen, kLoopback, TransportOptions{}, "s");
  EXPECT_THROW(server.Send(MakeMessage(ps::LOOKUP)), Error);  // no recipient
}

// Sends raw multipart frames, bypassing the encoder.
class RawSender {
 public:
  RawSender(const Context& context, const std::string& address)
      : socket_(context, ZmqSocket::kDealer, TransportOptions{}) {
    socket_.Connect(address);
  }
  void Send(const std::vector<Frame>& frames) {
    std::vector<std::shared_ptr<Frame>> shared;
    for (const Frame& f : frames) shared.push_back(std::make_shared<Frame>(f));
    ASSERT_TRUE(socket_.TrySend(nullptr, shared));
  }
  // Collects what comes back, until `n` messages or 5 s.
  std::vector<RawMessage> Drain(size_t n) {
    std::vector<RawMessage> got;
    const auto end = Clock::now() + milliseconds(5000);
    while (got.size() < n && Clock::now() < end) {
      if (auto m = socket_.TryReceive()) {
        got.push_back(std::move(*m));
      } else {
        std::this_thread::sleep_for(milliseconds(2));
      }
    }
    return got;
  }

 private:
  ZmqSocket socket_;
};

TEST(NetEndpointTest, ServerKeepsServingGoodRequestsThroughGarbage) {
  Context context;
  TransportOptions options;
  options.max_message_bytes = 1 << 16;
  options.max_frames = 8;
  EchoServer server(context, options);
  RawSender garbage(context, server.endpoint().address());
  Client client(context, server.endpoint().address(), options, "test server");
  std::mt19937_64 rng(7);
  int sent_garbage = 0;
  for (int round = 0; round < 20; ++round) {
    // Random bytes, an empty header, too many frames, a header with a lying payload
    // descriptor, too many bytes in all: each must be rejected, none may stop the server.
    Frame junk(1 + rng() % 64);
    for (auto& b : junk) b = static_cast<uint8_t>(rng());
    garbage.Send({junk});
    garbage.Send({Frame{}});
    garbage.Send(std::vector<Frame>(12, Frame(3)));
    Message liar = Lookup({1, 2});
    liar.header.set_request_id(77);
    std::vector<Frame> lying = Codec(options).Encode(std::move(liar));
    lying[1].resize(7);
    garbage.Send(lying);
    garbage.Send({Frame(10), Frame(40000), Frame(40000)});
    sent_garbage += 5;
    Message reply = client.Call(Lookup({round}), milliseconds(5000));
    EXPECT_EQ(reply.payloads[0].ToVector<float>()[0], -static_cast<float>(round));
  }
  EXPECT_EQ(server.served(), 20);
  // The garbage came on another connection, so it may still be in flight.
  const auto deadline = Clock::now() + milliseconds(5000);
  while (server.endpoint().stats().rejected < sent_garbage && Clock::now() < deadline)
    std::this_thread::sleep_for(milliseconds(5));
  EXPECT_EQ(server.endpoint().stats().rejected, sent_garbage);
  EXPECT_EQ(server.endpoint().stats().received, 20);
  // The garbage sender was told why, with kDataLoss.
  std::vector<RawMessage> answers = garbage.Drain(sent_garbage);
  ASSERT_EQ(static_cast<int>(answers.size()), sent_garbage);
  Message answer = Codec(options).Decode(std::move(answers[3].frames));
  EXPECT_EQ(answer.header.type(), ERROR);
  EXPECT_EQ(answer.header.error_code(), static_cast<int32_t>(StatusCode::kDataLoss));
  EXPECT_EQ(answer.header.request_id(), 77u);  // the lying LOOKUP's id, read from its header
  EXPECT_THAT(answer.header.error_message(), HasSubstr("needs 16 bytes but its frame has 7"));
}

TEST(NetEndpointTest, OversizedMessageIsDrainedAndTheNextOneArrivesIntact) {
  Context context;
  TransportOptions options;
  options.max_message_bytes = 4096;
  Endpoint server(context, Endpoint::kListen, kLoopback, options, "server");
  // Both on one connection, so the good message comes right behind the oversized one.
  RawSender raw(context, server.address());
  raw.Send({Frame(100), Frame(3000), Frame(3000), Frame(3000)});
  raw.Send(Codec(options).Encode(Lookup({42})));
  Received r = server.Receive(milliseconds(5000), "LOOKUP");
  EXPECT_EQ(r.message.payloads[0].ToVector<int64_t>(), std::vector<int64_t>{42});
  EXPECT_EQ(server.stats().rejected, 1);
  EXPECT_THAT(server.stats().last_rejection, HasSubstr("more than max_message_bytes 4096"));
}

TEST(NetEndpointTest, ReplyToAPeerThatHasGoneIsCountedNotFatal) {
  Context context;
  Endpoint server(context, Endpoint::kListen, kLoopback, TransportOptions{}, "server");
  Received request;
  {
    Client gone(context, server.address(), TransportOptions{}, "server");
    gone.Submit(Lookup({1}));
    request = server.Receive(milliseconds(5000), "LOOKUP");
  }
  // Until ZeroMQ has noticed the disconnect a reply may still be taken (and dropped).
  const auto deadline = Clock::now() + milliseconds(5000);
  while (server.stats().send_failures == 0 && Clock::now() < deadline) {
    server.Reply(request, MakeMessage(ps::LOOKUP_REPLY));
    std::this_thread::sleep_for(milliseconds(20));
  }
  EXPECT_GE(server.stats().send_failures, 1);
  Client other(context, server.address(), TransportOptions{}, "server");
  other.Submit(Lookup({2}));
  Received next = server.Receive(milliseconds(5000), "LOOKUP");
  EXPECT_EQ(next.message.payloads[0].ToVector<int64_t>(), std::vector<int64_t>{2});
  EXPECT_THAT(server.stats().last_send_failure, HasSubstr("LOOKUP_REPLY"));
}

TEST(NetEndpointTest, LateRepliesToForgottenRequestsAreDropped) {
  Context context;
  Endpoint server(context, Endpoint::kListen, kLoopback, TransportOptions{}, "server");
  Client client(context, server.address(), TransportOptions{}, "server");
  const uint64_t first = client.Submit(Lookup({1}));
  Received r = server.Receive(milliseconds(5000), "LOOKUP");
  EXPECT_THROW(client.Wait(first, milliseconds(20)), Error);  // times out, forgets
  server.Reply(r, MakeMessage(ps::LOOKUP_REPLY));             // arrives late
  const uint64_t second = client.Submit(Lookup({2}));
  server.Reply(server.Receive(milliseconds(5000), "LOOKUP"), MakeMessage(ps::FLUSH_ACK));
  EXPECT_EQ(client.Wait(second, milliseconds(5000)).header.type(), ps::FLUSH_ACK);
  EXPECT_FALSE(client.endpoint().TryReceive(milliseconds(50)).has_value());
}

// ---- injected propagation delay --------------------------------------------------------

TEST(NetDelayTest, BackToBackMessagesOverlapTheirDelay) {
  constexpr int kN = 10;
  constexpr int kDelayMs = 20;
  Context context;
  Endpoint server(context, Endpoint::kListen, kLoopback, TransportOptions{}, "server");
  TransportOptions delayed;
  delayed.delay_ms = kDelayMs;
  Client client(context, server.address(), delayed, "server");
  client.Submit(Lookup({-1}));  // warm up the connection
  server.Receive(milliseconds(5000), "warm-up");
  const auto start = Clock::now();
  for (int64_t i = 0; i < kN; ++i) client.Submit(Lookup({i}));
  const double send_ms = MsSince(start);
  EXPECT_LT(send_ms, kDelayMs) << "Send must not wait out the delay";
  for (int64_t i = 0; i < kN; ++i) {
    Received r = server.Receive(milliseconds(5000), "LOOKUP");
    EXPECT_EQ(r.message.payloads[0].ToVector<int64_t>()[0], i);  // order kept
    if (i == 0) {
      EXPECT_GE(MsSince(start), kDelayMs);
    }
  }
  const double total_ms = MsSince(start);
  EXPECT_GE(total_ms, kDelayMs);
  EXPECT_LT(total_ms, kN * kDelayMs / 2.0) << "delays must overlap, not add up";
}

TEST(NetDelayTest, PipelinedRoundTripsOverlapTheirDelays) {
  constexpr int kN = 8;
  constexpr int kDelayMs = 20;
  Context context;
  TransportOptions delayed;
  delayed.delay_ms = kDelayMs;
  EchoServer server(context, delayed);  // replies are delayed too
  Client client(context, server.endpoint().address(), delayed, "test server");
  client.Call(Lookup({0}), milliseconds(5000));  // warm up
  const auto start = Clock::now();
  std::vector<uint64_t> ids;
  for (int64_t i = 0; i < kN; ++i) ids.push_back(client.Submit(Lookup({i})));
  for (uint64_t id : ids) client.Wait(id, milliseconds(5000));
  const double total_ms = MsSince(start);
  EXPECT_GE(total_ms, 2 * kDelayMs);
  EXPECT_LT(total_ms, kN * 2 * kDelayMs / 2.0);
}

TEST(NetDelayTest, ClosingWaitsOutTheDelayOfQueuedMessages) {
  Context context;
  Endpoint server(context, Endpoint::kListen, kLoopback, TransportOptions{}, "server");
  {
    TransportOptions delayed;
    delayed.delay_ms = 50;
    Client client(context, server.address(), delayed, "server");
    client.Submit(Lookup({9}));
  }  // destroyed with the message still in its delay queue
  Received r = server.Receive(milliseconds(5000), "LOOKUP");
  EXPECT_EQ(r.message.payloads[0].ToVector<int64_t>(), std::vector<int64_t>{9});
}

}  // namespace
}  // namespace dlrm::net

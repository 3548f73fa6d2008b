// The cluster's messages (cluster/messages.h): round trips through the transport's codec,
// and one test per rule the decoders enforce (kDataLoss naming the problem) and the
// builders enforce (kInvalidArgument, before anything is sent).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <utility>

#include "engine/cluster/messages.h"
#include "engine/core/status.h"
#include "engine/net/codec.h"

namespace dlrm::cluster {
namespace {

using ::testing::HasSubstr;

net::Message RoundTrip(net::Message m) {
  net::Codec codec(net::TransportOptions{});
  return codec.Decode(codec.Encode(std::move(m)));
}

Hello ValidHello() {
  Hello h;
  h.set_role(ROLE_SERVER);
  h.set_rank(1);
  h.set_world_size(2);
  h.set_address("tcp://127.0.0.1:5000");
  return h;
}

Roster ValidRoster() {
  Roster roster;
  roster.set_world_size(2);
  for (int r = 0; r < 2; ++r) {
    PeerInfo* p = roster.add_peers();
    p->set_rank(r);
    p->set_role(r == 0 ? ROLE_SERVER : ROLE_TRAINER);
    p->set_address(r == 0 ? "tcp://127.0.0.1:5000" : "");
    p->set_link("link-" + std::to_string(r));
  }
  return roster;
}

// A message of `type` whose body is `body`, as a peer could send it (no builder checks).
net::Message Raw(MessageType type, const std::string& body) {
  net::Message m = net::MakeMessage(type);
  m.header.set_body(body);
  return m;
}

template <typename Decode>
void ExpectRejected(const net::Message& m, Decode decode, const std::string& needle) {
  try {
    decode(RoundTrip(m));
    ADD_FAILURE() << "decoded, expected a rejection containing: " << needle;
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), StatusCode::kDataLoss) << e.what();
    EXPECT_THAT(e.what(), HasSubstr(needle));
  }
}

template <typename Make, typename Arg>
void ExpectRefusedToSend(Make make, const Arg& arg, const std::string& needle) {
  try {
    make(arg);
    ADD_FAILURE() << "built, expected a refusal containing: " << needle;
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), StatusCode::kInvalidArgument) << e.what();
    EXPECT_THAT(e.what(), HasSubstr(needle));
  }
}

TEST(ClusterMessagesTest, RoundTripThroughTheTransport) {
  const Hello hello = DecodeHello(RoundTrip(MakeHello(ValidHello())));
  EXPECT_EQ(hello.SerializeAsString(), ValidHello().SerializeAsString());
  const Roster roster = DecodeRoster(RoundTrip(MakeRoster(ValidRoster())));
  EXPECT_EQ(roster.SerializeAsString(), ValidRoster().SerializeAsString());
  EXPECT_EQ(DecodeBarrier(RoundTrip(MakeBarrier(4))), 4);
}

TEST(ClusterMessagesTest, DecodersRefuseAnotherType) {
  ExpectRejected(MakeBarrier(1), DecodeHello, "expected HELLO, got BARRIER");
  ExpectRejected(MakeHello(ValidHello()), DecodeRoster, "expected ROSTER, got HELLO");
  ExpectRejected(MakeRoster(ValidRoster()), DecodeBarrier, "expected BARRIER, got ROSTER");
}

TEST(ClusterMessagesTest, RejectsHelloWithoutBody) {
  ExpectRejected(net::MakeMessage(HELLO), DecodeHello, "HELLO has no body (a dlrm.cluster.Hello)");
}

TEST(ClusterMessagesTest, RejectsHelloBodyThatIsNotAHello) {
  ExpectRejected(Raw(HELLO, "\xFF\xFF\xFF"), DecodeHello,
                 "HELLO body (3 bytes) is not a valid dlrm.cluster.Hello");
}

TEST(ClusterMessagesTest, RejectsHelloWithCoordinatorRole) {
  Hello h = ValidHello();
  h.set_role(ROLE_COORDINATOR);
  ExpectRejected(Raw(HELLO, h.SerializeAsString()), DecodeHello,
                 "HELLO role ROLE_COORDINATOR is not a peer role");
}

TEST(ClusterMessagesTest, RejectsHelloWithUnknownRoleNamingTheValue) {
  Hello h = ValidHello();
  h.clear_role();
  std::string body = h.SerializeAsString();
  body += static_cast<char>(Hello::kRoleFieldNumber << 3);  // varint field, value 9
  body += static_cast<char>(9);
  ExpectRejected(Raw(HELLO, body), DecodeHello, "HELLO role 9 is not a known value");
}

TEST(ClusterMessagesTest, RejectsHelloWithNegativeRank) {
  Hello h = ValidHello();
  h.set_rank(-1);
  ExpectRejected(Raw(HELLO, h.SerializeAsString()), DecodeHello, "HELLO rank -1 is negative");
}

TEST(ClusterMessagesTest, RejectsHelloWithoutWorldSize) {
  Hello h = ValidHello();
  h.clear_world_size();
  ExpectRejected(Raw(HELLO, h.SerializeAsString()), DecodeHello, "HELLO world_size is missing");
}

TEST(ClusterMessagesTest, RejectsHelloWhoseJobConfigIsNotAConfig) {
  Hello h = ValidHello();
  h.set_job_config("\xFF\xFF\xFF");
  ExpectRejected(Raw(HELLO, h.SerializeAsString()), DecodeHello,
                 "HELLO job_config (3 bytes) is not a valid dlrm.config.DlrmConfig");
  EXPECT_THROW(MakeHello(h), Error);  // nor does a sender send one
}

TEST(ClusterMessagesTest, RejectsRosterWithoutBody) {
  ExpectRejected(net::MakeMessage(ROSTER), DecodeRoster, "ROSTER has no body");
}

TEST(ClusterMessagesTest, RejectsRosterWithWrongPeerCount) {
  Roster roster = ValidRoster();
  roster.mutable_peers()->RemoveLast();
  ExpectRejected(Raw(ROSTER, roster.SerializeAsString()), DecodeRoster,
                 "ROSTER lists 1 peers for world_size 2");
}

TEST(ClusterMessagesTest, RejectsRosterWithPeersOutOfRankOrder) {
  Roster roster = ValidRoster();
  roster.mutable_peers(0)->set_rank(1);
  ExpectRejected(Raw(ROSTER, roster.SerializeAsString()), DecodeRoster, "ROSTER peer 0 has rank 1");
}

TEST(ClusterMessagesTest, RejectsRosterPeerWithoutRole) {
  Roster roster = ValidRoster();
  roster.mutable_peers(1)->clear_role();
  ExpectRejected(Raw(ROSTER, roster.SerializeAsString()), DecodeRoster,
                 "ROSTER peer 1 role is missing");
}

TEST(ClusterMessagesTest, RejectsRosterPeerWithoutLink) {
  Roster roster = ValidRoster();
  roster.mutable_peers(0)->clear_link();
  ExpectRejected(Raw(ROSTER, roster.SerializeAsString()), DecodeRoster,
                 "ROSTER peer 0 has no link");
}

TEST(ClusterMessagesTest, ALeaveCarriesItsFailureAndAPlainShutdownNone) {
  EXPECT_EQ(DecodeLeave(MakeLeave("")), "");
  EXPECT_FALSE(MakeLeave("").header.has_body());
  EXPECT_EQ(DecodeLeave(MakeLeave("out of memory")), "out of memory");
  EXPECT_EQ(DecodeLeave(net::MakeMessage(SHUTDOWN)), "");
  ExpectRejected(Raw(SHUTDOWN, "\xff\xff"), DecodeLeave, "is not a valid dlrm.cluster.Leave");
}

TEST(ClusterMessagesTest, RejectsBarrierWithoutGeneration) {
  ExpectRejected(net::MakeMessage(BARRIER), DecodeBarrier, "BARRIER has no step (its generation)");
}

TEST(ClusterMessagesTest, BuildersRefuseWhatTheReceiverWouldReject) {
  Hello hello = ValidHello();
  hello.set_role(ROLE_COORDINATOR);
  ExpectRefusedToSend(MakeHello, hello, "cannot send HELLO: HELLO role ROLE_COORDINATOR");
  Roster roster = ValidRoster();
  roster.set_world_size(3);
  ExpectRefusedToSend(MakeRoster, roster, "cannot send ROSTER: ROSTER lists 2 peers");
  ExpectRefusedToSend(MakeBarrier, int64_t{-1}, "cannot send BARRIER: generation -1");
}

}  // namespace
}  // namespace dlrm::cluster

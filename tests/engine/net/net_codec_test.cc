// The transport's encoder/decoder: round trips of every message kind, and one test per
// rule the decoder enforces (each must be rejected with kDataLoss naming the problem).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include "engine/cluster/messages.h"
#include "engine/collective/net_communicator.h"
#include "engine/core/status.h"
#include "engine/net/codec.h"
#include "engine/net/message.h"
#include "engine/ps/messages.h"

namespace dlrm::net {
namespace {

using ::testing::HasSubstr;

// ---- raw protobuf bytes, to build headers the typed API refuses to build -------------

void AppendVarint(Frame& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<uint8_t>(v | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<uint8_t>(v));
}
void AppendVarintField(Frame& out, int field, uint64_t v) {
  AppendVarint(out, static_cast<uint64_t>(field) << 3);
  AppendVarint(out, v);
}
void AppendBytesField(Frame& out, int field, const Frame& bytes) {
  AppendVarint(out, (static_cast<uint64_t>(field) << 3) | 2);
  AppendVarint(out, bytes.size());
  out.insert(out.end(), bytes.begin(), bytes.end());
}
Frame Serialize(const google::protobuf::Message& m) {
  std::string s = m.SerializeAsString();
  return Frame(s.begin(), s.end());
}

TransportOptions Options() { return TransportOptions{}; }

// A valid header + payload frames: LOOKUP with an I64 x 3 and an F32 x 2 payload.
std::vector<Frame> ValidLookup() {
  Message m = MakeMessage(ps::LOOKUP);
  m.header.set_request_id(9);
  m.payloads.push_back(Payload::Copy(std::vector<int64_t>{1, 2, 3}));
  m.payloads.push_back(Payload::Copy(std::vector<float>{0.5f, -1.0f}));
  return Codec(Options()).Encode(std::move(m));
}

// Decodes and expects kDataLoss with `needle` in the message.
void ExpectRejected(std::vector<Frame> frames, const std::string& needle,
                    const TransportOptions& options = Options()) {
  Codec codec(options);
  try {
    codec.Decode(std::move(frames));
    ADD_FAILURE() << "decoded, expected a rejection containing: " << needle;
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), StatusCode::kDataLoss) << e.what();
    EXPECT_THAT(e.what(), HasSubstr(needle));
  }
}

// A header frame with the given header and payload frames of the described sizes.
std::vector<Frame> WithHeader(const Header& h, std::vector<Frame> payloads = {}) {
  std::vector<Frame> frames{Serialize(h)};
  for (Frame& p : payloads) frames.push_back(std::move(p));
  return frames;
}

Header BaseHeader(MessageType type = ps::LOOKUP) {
  Header h;
  h.set_version(kWireVersion);
  h.set_type(type);
  return h;
}

Message RoundTrip(Message m, const TransportOptions& options = Options()) {
  Codec codec(options);
  return codec.Decode(codec.Encode(std::move(m)));
}

// ---- the registry of message types -------------------------------------------------

void RegisterEveryLayer() {
  cluster::RegisterMessageTypes();
  collective::RegisterMessageTypes();
  ps::RegisterMessageTypes();
}

// Every type of the build, with the layer that defines it: numbers are distinct, and a
// new type shows up here.
TEST(MessageTypesTest, ListsEveryLayersTypesOnce) {
  RegisterEveryLayer();
  std::vector<std::string> listed;
  for (const RegisteredMessageType& t : RegisteredMessageTypes())
    listed.push_back(std::to_string(t.type) + " " + t.name + " " + t.layer);
  EXPECT_THAT(listed, ::testing::ElementsAre(
                          "1 HELLO cluster", "2 ROSTER cluster", "3 LOOKUP ps", "4 LOOKUP_REPLY ps",
                          "5 UPDATE ps", "7 BARRIER cluster", "8 ERROR net", "9 SHUTDOWN cluster",
                          "10 HEARTBEAT cluster", "11 ALLGATHER collective", "12 FLUSH ps",
                          "13 FLUSH_ACK ps", "14 SAVE ps", "15 SAVE_ACK ps"));
  EXPECT_EQ(MessageTypeName(ps::SAVE_ACK), "SAVE_ACK");
  EXPECT_EQ(MessageTypeName(99), "TYPE_99");
  EXPECT_TRUE(IsRegisteredMessageType(ERROR));
  EXPECT_FALSE(IsRegisteredMessageType(6));
}

// A layer whose enum reuses another layer's number is a defect the next lookup reports
// (in a child process: the clash would poison this one's registry).
TEST(MessageTypesDeathTest, TwoLayersWithOneNumberFailNamingBoth) {
  EXPECT_EXIT(
      {
        RegisterEveryLayer();
        RegisterMessageTypes("test", &PayloadDescriptor_DType_descriptor);  // F32 = 1, ...
        try {
          IsRegisteredMessageType(1);
        } catch (const Error& e) {
          std::fprintf(stderr, "%s %s\n", StatusCodeName(e.code()), e.what());
          std::exit(3);
        }
        std::exit(0);
      },
      ::testing::ExitedWithCode(3), "INTERNAL message type 1 is both (HELLO|F32) of layer");
}

// ---- round trips -------------------------------------------------------------------

TEST(NetCodecTest, RoundTripsEveryMessageKindWithEveryDtype) {
  RegisterEveryLayer();
  for (const RegisteredMessageType& registered : RegisteredMessageTypes()) {
    const MessageType type = registered.type;
    Message m = MakeMessage(type);
    m.header.set_sender_rank(3);
    m.header.set_step(77);
    m.header.set_request_id(0xFFFFFFFFFFFFFFF0ull);
    m.header.set_body("role-specific");
    if (type == ERROR) {
      m.header.set_error_code(static_cast<int32_t>(StatusCode::kOutOfRange));
      m.header.set_error_message("id 99 out of range");
    }
    m.payloads.push_back(Payload::Copy(std::vector<float>{1.5f, -2.0f}));
    m.payloads.push_back(Payload::Copy(std::vector<double>{3.25}));
    m.payloads.push_back(Payload::Copy(std::vector<int32_t>{-7, 8, 9}));
    m.payloads.push_back(Payload::Copy(std::vector<int64_t>{int64_t{1} << 40}));
    m.payloads.push_back(Payload::Copy(std::vector<uint8_t>{1, 2, 3, 4, 5}));
    m.payloads.push_back(Payload::Zeros<float>(0));  // empty payloads are fine
    const Message sent = m;
    for (const char* secret : {"", "0123456789abcdef-secret"}) {
      TransportOptions options;
      options.secret = secret;
      Message got = RoundTrip(m, options);
      EXPECT_EQ(got.header.type(), type);
      EXPECT_EQ(got.header.sender_rank(), 3);
      EXPECT_EQ(got.header.step(), 77);
      EXPECT_EQ(got.header.request_id(), 0xFFFFFFFFFFFFFFF0ull);
      EXPECT_EQ(got.header.body(), "role-specific");
      EXPECT_FALSE(got.header.has_auth_tag());
      EXPECT_EQ(got.header.error_message(), sent.header.error_message());
      ASSERT_EQ(got.payloads.size(), sent.payloads.size());
      for (size_t i = 0; i < sent.payloads.size(); ++i)
        EXPECT_TRUE(got.payloads[i] == sent.payloads[i]) << MessageTypeName(type) << " " << i;
      ASSERT_EQ(got.header.payloads_size(), 6);
      EXPECT_EQ(got.header.payloads(2).dtype(), PayloadDescriptor::I32);
      EXPECT_EQ(got.header.payloads(2).count(), 3);
    }
  }
}

TEST(NetCodecTest, TypedPayloadAccess) {
  Payload p = Payload::Zeros<float>(3);
  p.mutable_data<float>()[1] = 2.5f;
  EXPECT_EQ(p.ToVector<float>(), (std::vector<float>{0, 2.5f, 0}));
  EXPECT_EQ(p.size_bytes(), 12u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p.data<float>()) % alignof(double), 0u);
  try {
    p.data<int32_t>();
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(e.what(), HasSubstr("payload holds F32, read as I32"));
  }
  EXPECT_THROW(Payload::FromBytes(PayloadDescriptor::I64, 2, Frame(15)), Error);
  EXPECT_THROW(Payload::Zeros<double>(-1), Error);
  EXPECT_THROW(Payload::Zeros<double>(std::numeric_limits<int64_t>::max()), Error);
}

TEST(NetCodecTest, EncodeRejectsWhatTheReceiverWouldReject) {
  Codec codec(Options());
  EXPECT_THROW(codec.Encode(Message{}), Error);  // no type
  Message error = MakeMessage(ERROR);            // no error code
  try {
    codec.Encode(std::move(error));
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(e.what(), HasSubstr("cannot send ERROR: ERROR has no error_code"));
  }
  TransportOptions small;
  small.max_message_bytes = 4096;
  Message big = MakeMessage(ps::UPDATE);
  big.payloads.push_back(Payload::Zeros<float>(2000));
  try {
    Codec(small).Encode(std::move(big));
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(e.what(), HasSubstr("more than max_message_bytes 4096"));
  }
}

TEST(NetCodecTest, InvalidOptionsAreRejectedNamingTheField) {
  TransportOptions o;
  o.max_frames = 0;
  EXPECT_THROW(Codec{o}, Error);
  o = TransportOptions{};
  o.secret = "short";
  try {
    Codec{o};
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("TransportOptions.secret has 5 bytes"));
    EXPECT_THAT(e.what(), ::testing::Not(HasSubstr("short")));
  }
  o = TransportOptions{};
  o.delay_ms = -1;
  EXPECT_THROW(Codec{o}, Error);
}

// ---- decoder rules, one per test -----------------------------------------------------

TEST(NetDecodeTest, RejectsNoFrames) { ExpectRejected({}, "no frames"); }

TEST(NetDecodeTest, RejectsTooManyFrames) {
  TransportOptions o;
  o.max_frames = 3;
  std::vector<Frame> frames = ValidLookup();
  frames.push_back(Frame(4));
  frames.push_back(Frame(4));
  ExpectRejected(std::move(frames), "5 frames, more than max_frames 3", o);
}

TEST(NetDecodeTest, RejectsHeaderLargerThanTheLimit) {
  TransportOptions o;
  o.max_header_bytes = 256;
  Header h = BaseHeader();
  h.set_body(std::string(300, 'x'));
  ExpectRejected(WithHeader(h), "more than max_header_bytes 256", o);
}

TEST(NetDecodeTest, RejectsMessageLargerThanTheLimit) {
  TransportOptions o;
  o.max_message_bytes = 4096;
  std::vector<Frame> frames = ValidLookup();
  frames[1].resize(5000);
  ExpectRejected(std::move(frames), "bytes in all, more than max_message_bytes 4096", o);
}

TEST(NetDecodeTest, RejectsHeaderThatIsNotProtobuf) {
  ExpectRejected({Frame{0xFF, 0xFF, 0xFF, 0xFF}}, "is not a valid dlrm.net.Header");
}

TEST(NetDecodeTest, RejectsMissingVersion) {
  Header h = BaseHeader();
  h.clear_version();
  ExpectRejected(WithHeader(h), "header version is missing");
}

TEST(NetDecodeTest, RejectsUnknownVersion) {
  Header h = BaseHeader();
  h.clear_version();
  Frame f = Serialize(h);
  AppendVarintField(f, Header::kVersionFieldNumber, 7);
  ExpectRejected({f}, "header version 7 is not a known value");
}

TEST(NetDecodeTest, RejectsUnspecifiedVersion) {
  Header h = BaseHeader();
  h.set_version(WIRE_VERSION_UNSPECIFIED);
  ExpectRejected(WithHeader(h), "header version WIRE_VERSION_UNSPECIFIED is not supported");
}

TEST(NetDecodeTest, RejectsMissingType) {
  Header h = BaseHeader();
  h.clear_type();
  ExpectRejected(WithHeader(h), "header type is missing");
}

TEST(NetDecodeTest, RejectsTypeThatIsNotPositive) {
  ExpectRejected(WithHeader(BaseHeader(0)), "header type 0 is not a message type (> 0)");
  ExpectRejected(WithHeader(BaseHeader(-3)), "header type -3 is not a message type (> 0)");
}

// The transport does not judge types: the role that receives one it does not handle says
// so (coordinator_test, server_test).
TEST(NetDecodeTest, DeliversATypeNoLayerRegistered) {
  Message m = Codec(Options()).Decode(WithHeader(BaseHeader(42)));
  EXPECT_EQ(m.header.type(), 42);
  EXPECT_EQ(MessageTypeName(42), "TYPE_42");
}

TEST(NetDecodeTest, RejectsVersionOne) {
  Header h = BaseHeader();
  h.set_version(WIRE_VERSION_1);
  ExpectRejected(WithHeader(h), "header version WIRE_VERSION_1 is not supported");
}

// Version 2 sent every row id in 8 bytes: a peer of that build would misread this one's
// feature updates, so it is refused by name before any payload is decoded.
TEST(NetDecodeTest, RejectsEarlierVersions) {
  for (const WireVersion v : {WIRE_VERSION_2, WIRE_VERSION_3, WIRE_VERSION_4}) {
    Header h = BaseHeader();
    h.set_version(v);
    ExpectRejected(WithHeader(h), "header version " + WireVersion_Name(v) +
                                      " is not supported (this build speaks version 5)");
  }
}

TEST(NetDecodeTest, RejectsMoreDescriptorsThanFrames) {
  std::vector<Frame> frames = ValidLookup();
  frames.pop_back();
  ExpectRejected(std::move(frames), "header describes 2 payloads but 1 payload frames follow");
}

TEST(NetDecodeTest, RejectsMoreFramesThanDescriptors) {
  std::vector<Frame> frames = ValidLookup();
  frames.push_back(Frame(8));
  ExpectRejected(std::move(frames), "header describes 2 payloads but 3 payload frames follow");
}

TEST(NetDecodeTest, RejectsMissingDtype) {
  Header h = BaseHeader();
  h.add_payloads()->set_count(1);
  ExpectRejected(WithHeader(h, {Frame(4)}), "payload 0 dtype is missing");
}

TEST(NetDecodeTest, RejectsUnknownDtypeNamingTheValue) {
  Header h = BaseHeader();
  Frame f = Serialize(h);
  Frame descriptor;
  AppendVarintField(descriptor, PayloadDescriptor::kDtypeFieldNumber, 9);
  AppendVarintField(descriptor, PayloadDescriptor::kCountFieldNumber, 1);
  AppendBytesField(f, Header::kPayloadsFieldNumber, descriptor);
  ExpectRejected({f, Frame(4)}, "payload 0 dtype 9 is not a known value");
}

TEST(NetDecodeTest, RejectsUnspecifiedDtype) {
  Header h = BaseHeader();
  h.add_payloads()->set_dtype(PayloadDescriptor::DTYPE_UNSPECIFIED);
  h.mutable_payloads(0)->set_count(0);
  ExpectRejected(WithHeader(h, {Frame()}), "payload 0 dtype DTYPE_UNSPECIFIED is not allowed");
}

TEST(NetDecodeTest, RejectsMissingCount) {
  Header h = BaseHeader();
  h.add_payloads()->set_dtype(PayloadDescriptor::F32);
  ExpectRejected(WithHeader(h, {Frame(4)}), "payload 0 count is missing");
}

TEST(NetDecodeTest, RejectsNegativeCount) {
  Header h = BaseHeader();
  h.add_payloads()->set_dtype(PayloadDescriptor::U8);
  h.mutable_payloads(0)->set_count(-4);
  ExpectRejected(WithHeader(h, {Frame()}), "payload 0 count -4 is negative");
}

TEST(NetDecodeTest, RejectsPayloadShorterThanDescribed) {
  std::vector<Frame> frames = ValidLookup();
  frames[2].pop_back();
  ExpectRejected(std::move(frames), "payload 1 (F32 x 2) needs 8 bytes but its frame has 7");
}

TEST(NetDecodeTest, RejectsPayloadLongerThanDescribed) {
  std::vector<Frame> frames = ValidLookup();
  frames[1].resize(32);
  ExpectRejected(std::move(frames), "payload 0 (I64 x 3) needs 24 bytes but its frame has 32");
}

TEST(NetDecodeTest, RejectsHugeCountWithoutOverflowOrAllocation) {
  Header h = BaseHeader();
  h.add_payloads()->set_dtype(PayloadDescriptor::F64);
  // count * 8 wraps around to 8 in 64-bit arithmetic; the frame has 8 bytes.
  h.mutable_payloads(0)->set_count((int64_t{1} << 61) + 1);
  ExpectRejected(WithHeader(h, {Frame(8)}), "needs too many bytes but its frame has 8");
  h.mutable_payloads(0)->set_count(std::numeric_limits<int64_t>::max());
  ExpectRejected(WithHeader(h, {Frame(8)}), "needs too many bytes");
}

TEST(NetDecodeTest, RejectsNegativeSenderRank) {
  Header h = BaseHeader();
  h.set_sender_rank(-2);
  ExpectRejected(WithHeader(h), "sender_rank -2 is negative");
}

TEST(NetDecodeTest, RejectsNegativeStep) {
  Header h = BaseHeader();
  h.set_step(-1);
  ExpectRejected(WithHeader(h), "step -1 is negative");
}

TEST(NetDecodeTest, RejectsErrorWithoutCode) {
  ExpectRejected(WithHeader(BaseHeader(ERROR)), "ERROR has no error_code");
}

TEST(NetDecodeTest, RejectsErrorWithCodeOk) {
  Header h = BaseHeader(ERROR);
  h.set_error_code(0);
  ExpectRejected(WithHeader(h), "ERROR error_code 0 is not a dlrm status code other than OK");
}

TEST(NetDecodeTest, RejectsErrorWithUnknownCode) {
  Header h = BaseHeader(ERROR);
  h.set_error_code(1000);
  ExpectRejected(WithHeader(h), "ERROR error_code 1000");
}

TEST(NetDecodeTest, AcceptsUnknownFieldsFromNewerSenders) {
  Frame f = Serialize(BaseHeader(cluster::HEARTBEAT));
  AppendVarintField(f, 90, 12345);  // a field this build does not know
  Message m = Codec(Options()).Decode({f});
  EXPECT_EQ(m.header.type(), cluster::HEARTBEAT);
}

}  // namespace
}  // namespace dlrm::net

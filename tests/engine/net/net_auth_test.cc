// Message authentication (XChaCha20-keyed Poly1305, net/auth.h): accepted with the same
// secret; rejected with a wrong secret, a missing tag, an unexpected tag, a tampered
// header, payload or nonce, and bytes moved between frames; every message gets its own
// nonce. Also end to end through endpoints.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sodium.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "engine/core/status.h"
#include "engine/net/auth.h"
#include "engine/net/client.h"
#include "engine/net/codec.h"
#include "engine/net/endpoint.h"
#include "engine/ps/messages.h"

namespace dlrm::net {
namespace {

// The messages these tests pass around are the embedding service's; registered for their
// names in errors and logs.
[[maybe_unused]] const bool kTypesRegistered = (ps::RegisterMessageTypes(), true);

using std::chrono::milliseconds;
using ::testing::HasSubstr;

const char kSecret[] = "correct horse battery staple";
const char kOtherSecret[] = "incorrect horse battery staple";

TransportOptions WithSecret(const std::string& secret) {
  TransportOptions o;
  o.secret = secret;
  return o;
}

std::vector<Frame> SignedUpdate(const std::string& secret = kSecret) {
  Message m = MakeMessage(ps::UPDATE);
  m.header.set_step(12);
  m.payloads.push_back(Payload::Copy(std::vector<int64_t>{5, 6}));
  m.payloads.push_back(Payload::Copy(std::vector<float>{0.25f, 0.5f, 0.75f, 1.0f}));
  return Codec(WithSecret(secret)).Encode(std::move(m));
}

void ExpectRejected(std::vector<Frame> frames, const TransportOptions& options,
                    const std::string& needle) {
  try {
    Codec(options).Decode(std::move(frames));
    ADD_FAILURE() << "accepted; expected: " << needle;
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), StatusCode::kDataLoss);
    EXPECT_THAT(e.what(), HasSubstr(needle));
  }
}

TEST(NetAuthTest, SameSecretIsAccepted) {
  Message m = Codec(WithSecret(kSecret)).Decode(SignedUpdate());
  EXPECT_EQ(m.header.step(), 12);
  EXPECT_EQ(m.payloads[1].ToVector<float>(), (std::vector<float>{0.25f, 0.5f, 0.75f, 1.0f}));
}

// The tag is Poly1305 under the first 32 bytes of XChaCha20's keystream for its nonce
// (key: BLAKE2b-256 of the secret), over every part behind its 8-byte little-endian
// length. Recomputed here with libsodium's own Poly1305, it equals the Authenticator's
// (OpenSSL's Poly1305): peers built with either implementation accept each other's tags.
TEST(NetAuthTest, TagIsPoly1305OfTheLengthPrefixedPartsUnderAOneMessageKey) {
  ASSERT_GE(sodium_init(), 0);
  const std::vector<uint8_t> header = {1, 2, 3, 4, 5};
  std::vector<std::vector<uint8_t>> payloads = {{}, std::vector<uint8_t>(100000)};
  for (size_t i = 0; i < payloads[1].size(); ++i) payloads[1][i] = static_cast<uint8_t>(i * 7);
  const AuthTag tag = Authenticator(kSecret).Tag(header.data(), header.size(), payloads);
  uint8_t key[32], one_time_key[32], want[16];
  crypto_generichash(key, sizeof key, reinterpret_cast<const uint8_t*>(kSecret), sizeof kSecret - 1,
                     nullptr, 0);
  crypto_stream_xchacha20(one_time_key, sizeof one_time_key, tag.data(), key);
  crypto_onetimeauth_state state;
  crypto_onetimeauth_init(&state, one_time_key);
  auto part = [&](const std::vector<uint8_t>& bytes) {
    uint8_t len[8];
    for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(bytes.size() >> (8 * i));
    crypto_onetimeauth_update(&state, len, sizeof len);
    crypto_onetimeauth_update(&state, bytes.data(), bytes.size());
  };
  part(header);
  for (const auto& p : payloads) part(p);
  crypto_onetimeauth_final(&state, want);
  EXPECT_TRUE(std::equal(want, want + 16, tag.begin() + kAuthNonceBytes));
}

TEST(NetAuthTest, TagIsTheLastFieldOfTheHeaderFrame) {
  const std::vector<Frame> frames = SignedUpdate();
  const Frame& h = frames[0];
  ASSERT_GT(h.size(), kAuthTrailerBytes);
  EXPECT_EQ(h[h.size() - kAuthTrailerBytes], kAuthTagKey);
  EXPECT_EQ(h[h.size() - kAuthTrailerBytes + 1], kAuthTagBytes);
}

TEST(NetAuthTest, WrongSecretIsRejected) {
  ExpectRejected(SignedUpdate(kOtherSecret), WithSecret(kSecret), "auth tag does not match");
}

TEST(NetAuthTest, MissingTagIsRejected) {
  Message m = MakeMessage(ps::UPDATE);
  ExpectRejected(Codec(TransportOptions{}).Encode(std::move(m)), WithSecret(kSecret),
                 "has no auth tag but this endpoint requires one");
}

TEST(NetAuthTest, UnexpectedTagIsRejected) {
  ExpectRejected(SignedUpdate(), TransportOptions{}, "this endpoint has no secret");
}

TEST(NetAuthTest, TamperedPayloadIsRejected) {
  std::vector<Frame> frames = SignedUpdate();
  frames[2][3] ^= 0x01;
  ExpectRejected(std::move(frames), WithSecret(kSecret), "auth tag does not match");
}

TEST(NetAuthTest, TamperedHeaderIsRejected) {
  std::vector<Frame> frames = SignedUpdate();
  // Re-encode the header with another step but keep the old tag.
  Header h;
  ASSERT_TRUE(h.ParseFromArray(frames[0].data(), static_cast<int>(frames[0].size())));
  const std::string tag = h.auth_tag();
  h.clear_auth_tag();
  h.set_step(13);
  std::string bytes = h.SerializeAsString();
  frames[0].assign(bytes.begin(), bytes.end());
  frames[0].push_back(kAuthTagKey);
  frames[0].push_back(kAuthTagBytes);
  frames[0].insert(frames[0].end(), tag.begin(), tag.end());
  ExpectRejected(std::move(frames), WithSecret(kSecret), "auth tag does not match");
}

TEST(NetAuthTest, TagThatIsNotTheTrailerIsRejected) {
  std::vector<Frame> frames = SignedUpdate();
  // Move the tag field to the front: the same bytes, no longer a trailer.
  Frame& h = frames[0];
  Frame trailer(h.end() - kAuthTrailerBytes, h.end());
  h.resize(h.size() - kAuthTrailerBytes);
  h.insert(h.begin(), trailer.begin(), trailer.end());
  ExpectRejected(std::move(frames), WithSecret(kSecret), "auth tag does not match");
}

TEST(NetAuthTest, BytesMovedBetweenFramesAreRejected) {
  // Two U8 payloads of 4 bytes; moving one byte across the boundary keeps the
  // concatenation but not the frames: the length-prefixed MAC catches it.
  Message m = MakeMessage(ps::UPDATE);
  m.payloads.push_back(Payload::Copy(std::vector<uint8_t>{1, 2, 3, 4}));
  m.payloads.push_back(Payload::Copy(std::vector<uint8_t>{5, 6, 7, 8}));
  std::vector<Frame> frames = Codec(WithSecret(kSecret)).Encode(std::move(m));
  const Authenticator auth(kSecret);
  std::vector<Frame> moved = frames;
  moved[2].insert(moved[2].begin(), moved[1].back());
  moved[1].pop_back();
  EXPECT_TRUE(auth.Verify(frames[0], frames, 1));
  EXPECT_FALSE(auth.Verify(moved[0], moved, 1));
}

TEST(NetAuthTest, EveryMessageHasItsOwnNonceAndATamperedOneIsRejected) {
  const std::vector<Frame> a = SignedUpdate(), b = SignedUpdate();
  const Frame nonce_a(a[0].end() - kAuthTagBytes, a[0].end() - kAuthMacBytes);
  const Frame nonce_b(b[0].end() - kAuthTagBytes, b[0].end() - kAuthMacBytes);
  EXPECT_NE(nonce_a, nonce_b);  // the same message twice: two one-time keys
  std::vector<Frame> tampered = a;
  tampered[0][tampered[0].size() - kAuthTagBytes] ^= 0x01;
  ExpectRejected(std::move(tampered), WithSecret(kSecret), "auth tag does not match");
}

TEST(NetAuthTest, ShortSecretIsRefusedWithoutEchoingIt) {
  try {
    Authenticator a("tiny");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(e.what(), ::testing::Not(HasSubstr("tiny")));
  }
}

// ---- through endpoints -----------------------------------------------------------------

// Answers every LOOKUP with a LOOKUP_REPLY until `n` messages were handled or 2 s passed.
void ServeLookups(Endpoint& server, int n) {
  for (int i = 0; i < n; ++i) {
    auto r = server.TryReceive(milliseconds(2000));
    if (!r) return;
    server.Reply(*r, MakeMessage(ps::LOOKUP_REPLY));
  }
}

TEST(NetAuthTest, EndpointsWithTheSameSecretTalk) {
  Context context;
  Endpoint server(context, Endpoint::kListen, "tcp://127.0.0.1:*", WithSecret(kSecret), "server");
  std::thread serve([&] { ServeLookups(server, 1); });
  Client client(context, server.address(), WithSecret(kSecret), "server");
  EXPECT_EQ(client.Call(MakeMessage(ps::LOOKUP), milliseconds(5000)).header.type(),
            ps::LOOKUP_REPLY);
  serve.join();
  EXPECT_EQ(server.stats().rejected, 0);
}

TEST(NetAuthTest, EndpointRejectsAWrongSecretAndTheSenderLearnsWhy) {
  Context context;
  Endpoint server(context, Endpoint::kListen, "tcp://127.0.0.1:*", WithSecret(kSecret), "server");
  Client client(context, server.address(), WithSecret(kOtherSecret), "server");
  const uint64_t id = client.Submit(MakeMessage(ps::LOOKUP));
  try {
    client.Wait(id, milliseconds(300));
    ADD_FAILURE();
  } catch (const Error& e) {
    // The server's ERROR answer is signed with its own secret, which the client rejects
    // in turn; the timeout says so.
    EXPECT_EQ(e.code(), StatusCode::kTimeout);
    EXPECT_THAT(e.what(), HasSubstr("auth tag does not match"));
  }
  EXPECT_EQ(server.stats().rejected, 1);
  EXPECT_THAT(server.stats().last_rejection, HasSubstr("auth tag does not match"));
  EXPECT_FALSE(server.TryReceive(milliseconds(0)).has_value());
}

TEST(NetAuthTest, EndpointRejectsUnauthenticatedMessagesAndAnswersWithTheReason) {
  Context context;
  Endpoint server(context, Endpoint::kListen, "tcp://127.0.0.1:*", WithSecret(kSecret), "server");
  // Neither side of this pair authenticates; the server's ERROR answer is then rejected
  // by the client as unexpectedly signed, which its timeout names.
  Client client(context, server.address(), TransportOptions{}, "server");
  try {
    client.Call(MakeMessage(ps::LOOKUP), milliseconds(300));
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), StatusCode::kTimeout);
    EXPECT_THAT(e.what(), HasSubstr("this endpoint has no secret"));
  }
  EXPECT_THAT(server.stats().last_rejection, HasSubstr("has no auth tag"));
}

}  // namespace
}  // namespace dlrm::net

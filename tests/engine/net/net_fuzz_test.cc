// Deterministic fuzzing of the decoder, the transport's security boundary: 4 x 60k
// random and mutated multipart inputs from fixed seeds. Every input must be decoded or
// rejected with kDataLoss, by the transport and then by the decoder of the layer that
// defines its type (cluster, ps) (never a crash, an overflow or another exception; run under
// ASan/UBSan in the sanitizer build), the same way every time; what is accepted must
// satisfy the wire invariants and re-encode to itself; and with a secret, nothing but
// an unchanged signed message may be accepted.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "engine/cluster/messages.h"
#include "engine/core/status.h"
#include "engine/net/codec.h"
#include "engine/net/message.h"
#include "engine/ps/messages.h"

namespace dlrm::net {
namespace {

constexpr int kInputsPerTest = 60000;
const char kSecret[] = "fuzzing-secret-0123456789";

struct Outcome {
  bool accepted = false;
  std::string error;   // when rejected
  std::string header;  // when accepted: the decoded header, serialized
  std::vector<Payload> payloads;
};

// What the layer that defines the message's type reads of it: that decoder, too, must
// accept the message or reject it with kDataLoss.
void DecodeForItsLayer(const Message& m) {
  switch (m.header.type()) {
    case cluster::HELLO: cluster::DecodeHello(m); break;
    case cluster::ROSTER: cluster::DecodeRoster(m); break;
    case cluster::BARRIER: cluster::DecodeBarrier(m); break;
    case ps::LOOKUP: ps::DecodeLookup(m); break;
    case ps::UPDATE: ps::DecodeUpdate(m); break;
    default: break;
  }
}

Outcome Run(const Codec& codec, const std::vector<Frame>& frames) {
  Outcome o;
  try {
    Message m = codec.Decode(frames);
    try {
      DecodeForItsLayer(m);
    } catch (const Error& e) {
      if (e.code() != StatusCode::kDataLoss)
        ADD_FAILURE() << MessageTypeName(m.header.type()) << " rejected by its layer with "
                      << StatusCodeName(e.code()) << ": " << e.what();
    }
    o.accepted = true;
    o.header = m.header.SerializeAsString();
    o.payloads = std::move(m.payloads);
  } catch (const Error& e) {
    if (e.code() != StatusCode::kDataLoss)
      ADD_FAILURE() << "rejected with " << StatusCodeName(e.code()) << ": " << e.what();
    o.error = e.what();
  }
  return o;
}

// Valid messages of every shape the fuzzer starts from.
std::vector<Message> Seeds() {
  std::vector<Message> seeds;
  Message lookup = MakeMessage(ps::LOOKUP);
  lookup.header.set_sender_rank(2);
  lookup.header.set_step(40);
  lookup.header.set_request_id(17);
  lookup.payloads.push_back(Payload::Copy(std::vector<int64_t>{3, 1, 4, 1, 5}));
  lookup.payloads.push_back(Payload::Copy(std::vector<int32_t>{2, 3}));
  seeds.push_back(lookup);
  Message reply = MakeMessage(ps::LOOKUP_REPLY);
  reply.payloads.push_back(Payload::Zeros<float>(24));
  reply.payloads.push_back(Payload::Copy(std::vector<double>{1.0, -2.0}));
  reply.payloads.push_back(Payload::Copy(std::vector<uint8_t>{9}));
  seeds.push_back(reply);
  Message error = MakeErrorMessage(StatusCode::kOutOfRange, "id 12 is out of range", 5);
  seeds.push_back(error);
  cluster::Hello hello;
  hello.set_role(cluster::ROLE_TRAINER);
  hello.set_rank(1);
  hello.set_world_size(3);
  hello.set_address("tcp://127.0.0.1:4000");
  seeds.push_back(cluster::MakeHello(hello));
  cluster::Roster roster;
  roster.set_world_size(2);
  for (int r = 0; r < 2; ++r) {
    cluster::PeerInfo* p = roster.add_peers();
    p->set_rank(r);
    p->set_role(r ? cluster::ROLE_TRAINER : cluster::ROLE_SERVER);
    p->set_address("tcp://10.0.0.1:5000");
    p->set_link("link-" + std::to_string(r));
  }
  seeds.push_back(cluster::MakeRoster(roster));
  seeds.push_back(cluster::MakeBarrier(3));
  seeds.push_back(MakeMessage(cluster::HEARTBEAT));
  Message update = MakeMessage(ps::UPDATE);
  update.header.set_body(std::string("\x08\x96\x01", 3));
  update.payloads.push_back(Payload::Copy(std::vector<int64_t>{7}));
  update.payloads.push_back(Payload::Zeros<float>(0));
  seeds.push_back(update);
  return seeds;
}

void AppendVarint(Frame& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<uint8_t>(v | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<uint8_t>(v));
}

uint64_t InterestingValue(std::mt19937_64& rng) {
  static const uint64_t kValues[] = {0,
                                     1,
                                     2,
                                     5,
                                     7,
                                     8,
                                     11,
                                     99,
                                     127,
                                     128,
                                     255,
                                     1u << 31,
                                     0x7FFFFFFFull,
                                     0xFFFFFFFFull,
                                     1ull << 61,
                                     ~0ull,
                                     ~0ull - 3,
                                     0x8000000000000000ull};
  if (rng() % 2) return kValues[rng() % (sizeof kValues / sizeof kValues[0])];
  return rng() >> (rng() % 64);
}

class Mutator {
 public:
  Mutator(uint64_t seed, std::vector<std::vector<Frame>> bases)
      : rng_(seed), bases_(std::move(bases)) {}

  // Returns the index of the base it started from.
  size_t Next(std::vector<Frame>& out) {
    const size_t base = rng_() % bases_.size();
    out = bases_[base];
    const int rounds = 1 + static_cast<int>(rng_() % 3);
    for (int i = 0; i < rounds; ++i) Mutate(out);
    return base;
  }

 private:
  Frame RandomBytes(size_t max) {
    Frame f(rng_() % (max + 1));
    for (auto& b : f) b = static_cast<uint8_t>(rng_());
    return f;
  }

  void Mutate(std::vector<Frame>& frames) {
    const size_t pick = frames.empty() ? 0 : rng_() % frames.size();
    switch (rng_() % 12) {
      case 0: {  // all new random frames
        frames.clear();
        const size_t n = rng_() % 5;
        for (size_t i = 0; i < n; ++i) frames.push_back(RandomBytes(64));
        break;
      }
      case 1:  // flip bits
        if (!frames.empty() && !frames[pick].empty()) {
          const int flips = 1 + static_cast<int>(rng_() % 4);
          for (int i = 0; i < flips; ++i)
            frames[pick][rng_() % frames[pick].size()] ^= static_cast<uint8_t>(1u << (rng_() % 8));
        }
        break;
      case 2:  // truncate
        if (!frames.empty() && !frames[pick].empty())
          frames[pick].resize(rng_() % frames[pick].size());
        break;
      case 3: {  // extend
        if (frames.empty()) break;
        Frame extra = RandomBytes(16);
        frames[pick].insert(frames[pick].end(), extra.begin(), extra.end());
        break;
      }
      case 4: {  // insert a frame (a copy, or random)
        Frame f = (rng_() % 2 && !frames.empty()) ? frames[pick] : RandomBytes(32);
        frames.insert(frames.begin() + static_cast<long>(rng_() % (frames.size() + 1)),
                      std::move(f));
        break;
      }
      case 5:  // remove a frame
        if (!frames.empty()) frames.erase(frames.begin() + static_cast<long>(pick));
        break;
      case 6:  // an interesting byte in the header
        if (!frames.empty() && !frames[0].empty()) {
          static const uint8_t kBytes[] = {0x00, 0x01, 0x7F, 0x80, 0xFF, 0x08, 0x10, 0x7A, 0x20};
          frames[0][rng_() % frames[0].size()] = kBytes[rng_() % sizeof kBytes];
        }
        break;
      case 7:  // swap two frames
        if (frames.size() >= 2) std::swap(frames[pick], frames[rng_() % frames.size()]);
        break;
      case 8:  // header of another message
        if (!frames.empty()) frames[0] = bases_[rng_() % bases_.size()][0];
        break;
      case 9: {  // append a varint field with an interesting value (later fields win)
        if (frames.empty()) break;
        AppendVarint(frames[0], (static_cast<uint64_t>(1 + rng_() % 16) << 3));
        AppendVarint(frames[0], InterestingValue(rng_));
        break;
      }
      case 10: {  // append a payload descriptor with arbitrary dtype and count
        if (frames.empty()) break;
        Frame d;
        AppendVarint(d, 1 << 3);
        AppendVarint(d, rng_() % 8);
        AppendVarint(d, 2 << 3);
        AppendVarint(d, InterestingValue(rng_));
        AppendVarint(frames[0], (6 << 3) | 2);
        AppendVarint(frames[0], d.size());
        frames[0].insert(frames[0].end(), d.begin(), d.end());
        if (rng_() % 2) frames.push_back(RandomBytes(40));
        break;
      }
      case 11: {  // a length-delimited field whose length lies
        if (frames.empty()) break;
        AppendVarint(frames[0], (static_cast<uint64_t>(1 + rng_() % 16) << 3) | 2);
        AppendVarint(frames[0], InterestingValue(rng_));
        Frame tail = RandomBytes(8);
        frames[0].insert(frames[0].end(), tail.begin(), tail.end());
        break;
      }
    }
  }

  std::mt19937_64 rng_;
  std::vector<std::vector<Frame>> bases_;
};

void Fuzz(uint64_t seed, bool with_secret) {
  TransportOptions options;
  options.max_frames = 6;
  options.max_header_bytes = 512;
  options.max_message_bytes = 2048;
  if (with_secret) options.secret = kSecret;
  const Codec codec(options);
  const Codec plain(TransportOptions{});
  std::vector<std::vector<Frame>> bases;
  for (const Message& m : Seeds()) bases.push_back(codec.Encode(m));
  Mutator mutator(seed, bases);
  int accepted = 0;
  std::vector<Frame> frames;
  for (int i = 0; i < kInputsPerTest; ++i) {
    const size_t base = mutator.Next(frames);
    const Outcome a = Run(codec, frames);
    const Outcome b = Run(codec, frames);
    ASSERT_EQ(a.accepted, b.accepted) << "input " << i;
    ASSERT_EQ(a.error, b.error) << "input " << i;
    if (!a.accepted) continue;
    ++accepted;
    ASSERT_EQ(a.header, b.header) << "input " << i;
    ASSERT_TRUE(a.payloads == b.payloads) << "input " << i;
    if (with_secret) {
      // Only an unchanged signed message may pass (a no-op mutation, or one that landed
      // on another valid signed message).
      bool is_a_base = false;
      for (const auto& f : bases) is_a_base = is_a_base || f == frames;
      ASSERT_TRUE(is_a_base) << "input " << i << " from base " << base
                             << " was altered but accepted";
    }
    // Accepted messages satisfy the wire invariants and re-encode to themselves.
    Header h;
    ASSERT_TRUE(h.ParseFromString(a.header));
    ASSERT_EQ(h.payloads_size(), static_cast<int>(a.payloads.size()));
    for (int p = 0; p < h.payloads_size(); ++p) {
      ASSERT_GT(DTypeSize(h.payloads(p).dtype()), 0);
      ASSERT_EQ(a.payloads[p].size_bytes(),
                static_cast<size_t>(h.payloads(p).count() * DTypeSize(h.payloads(p).dtype())));
    }
    Message again;
    again.header = h;
    again.payloads = a.payloads;
    const Outcome c = Run(plain, plain.Encode(again));
    ASSERT_TRUE(c.accepted) << "input " << i << ": " << c.error;
    ASSERT_TRUE(c.payloads == a.payloads);
  }
  // The mutations must reach past the first checks, and most inputs must fail.
  EXPECT_GT(accepted, kInputsPerTest / 100);
  EXPECT_LT(accepted, kInputsPerTest / 2);
}

TEST(NetFuzzTest, DecoderWithoutSecretSeed1) { Fuzz(1, false); }
TEST(NetFuzzTest, DecoderWithoutSecretSeed2) { Fuzz(2, false); }
TEST(NetFuzzTest, DecoderWithSecretSeed3) { Fuzz(3, true); }
TEST(NetFuzzTest, DecoderWithSecretSeed4) { Fuzz(4, true); }

}  // namespace
}  // namespace dlrm::net

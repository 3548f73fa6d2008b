// libFuzzer harness (issue 17): the transport's wire decoder (net::Codec::Decode, the
// security boundary every received message passes) and, for what it accepts, every
// layer's message decoder (ps/messages.h, cluster/messages.h). The input is a list of
// frames: a count byte, then per frame a 4-byte little-endian length and that many bytes
// (cut at the input's end). Every input decodes or is refused naming bad input
// (fuzz_support.h). Seeds: each message type the servers and the coordinator receive,
// encoded by the senders' own encoders (LOOKUP_REPLY and UPDATE also with 16-bit values,
// issue 16's wire_precision; HELLO also with a job config, which the coordinator compares).
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "engine/cluster/job_config.h"
#include "engine/cluster/messages.h"
#include "engine/net/codec.h"
#include "engine/ps/messages.h"
#include "tests/fuzz/fuzz_support.h"

namespace dlrm::fuzz {
namespace {

std::vector<net::Frame> SplitFrames(const uint8_t* data, size_t size) {
  std::vector<net::Frame> frames;
  if (size == 0) return frames;
  const size_t count = data[0] % 8;
  size_t at = 1;
  for (size_t f = 0; f < count && at + 4 <= size; ++f) {
    uint32_t length = 0;
    std::memcpy(&length, data + at, 4);
    at += 4;
    const size_t n = std::min<size_t>(length, size - at);
    frames.emplace_back(data + at, data + at + n);
    at += n;
  }
  return frames;
}

std::string JoinFrames(const std::vector<net::Frame>& frames) {
  std::string out(1, static_cast<char>(frames.size()));
  for (const net::Frame& f : frames) {
    const auto length = static_cast<uint32_t>(f.size());
    out.append(reinterpret_cast<const char*>(&length), 4);
    out.append(f.begin(), f.end());
  }
  return out;
}

// A small job's config: what a HELLO's job_config holds.
const config::DlrmConfig& SeedJobConfig() {
  static const config::DlrmConfig config = [] {
    config::DlrmConfig c;
    config::TableConfig* table = c.mutable_model()->add_tables();
    table->set_name("t0");
    table->set_num_rows(10);
    table->set_dim(4);
    c.mutable_sparse_optimizer()->set_learning_rate(0.1f);
    c.set_seed(3);
    return c;
  }();
  return config;
}

const net::Codec& TheCodec() {
  static const net::Codec codec{net::TransportOptions{}};
  return codec;
}

std::vector<std::string> Seeds() {
  ps::RegisterMessageTypes();
  std::vector<net::Message> messages;
  std::vector<ps::ShardRows> request = {{0, {1, 2, 3}, {}}, {1, {7}, {}}};
  messages.push_back(ps::EncodeLookup(4, request));
  for (ps::ShardRows& r : request) r.rows.assign(r.ids.size() * 2, 0.5f);
  messages.push_back(ps::EncodeLookupReply(request));
  messages.push_back(ps::EncodeLookupReply(request, config::TableConfig::BF16));
  ps::UpdateMessage update;
  update.rank = 1;
  update.step = 4;
  update.lr = 0.1f;
  update.part.push_back({0, {1, 2}, {5, 6, 7}, {}, {0.1f, 0.2f, 0.3f, 0.4f}});
  messages.push_back(ps::EncodeUpdate(update));
  update.wire = config::TableConfig::FP16;  // 16-bit gradients
  messages.push_back(ps::EncodeUpdate(update));
  messages.push_back(ps::StepMessage(ps::SAVE, 9, "/tmp/x"));
  cluster::Hello hello;
  hello.set_role(cluster::ROLE_TRAINER);
  hello.set_rank(0);
  hello.set_world_size(2);
  messages.push_back(cluster::MakeHello(hello));
  hello.set_job_config(cluster::JobConfigOf(SeedJobConfig()));
  messages.push_back(cluster::MakeHello(hello));
  messages.push_back(cluster::MakeBarrier(3));
  std::vector<std::string> seeds;
  for (net::Message& m : messages) seeds.push_back(JoinFrames(TheCodec().Encode(std::move(m))));
  return seeds;
}

// Every layer's decoder on an accepted message: each one answers or refuses it.
void DecodeAsEveryType(const net::Message& m) {
  RefusedOrDone([&] { ps::DecodeLookup(m); });
  for (auto wire : {config::TableConfig::FP32, config::TableConfig::BF16}) {
    RefusedOrDone([&] {
      std::vector<ps::ShardRows> request = {{0, {1, 2, 3}, {}}, {1, {7}, {}}};
      ps::DecodeLookupReply(m, &request, wire);
    });
  }
  RefusedOrDone([&] { ps::DecodeUpdate(m); });
  RefusedOrDone([&] { ps::RequiredStep(m); });
  RefusedOrDone([&] {
    // The coordinator compares an admitted HELLO's config bytes, whatever they hold.
    const cluster::Hello hello = cluster::DecodeHello(m);
    cluster::JobConfigDifference(cluster::JobConfigOf(SeedJobConfig()), hello.job_config());
  });
  RefusedOrDone([&] { cluster::DecodeRoster(m); });
  RefusedOrDone([&] { cluster::DecodeBarrier(m); });
  RefusedOrDone([&] { net::DescribeMessage(m); });
}

}  // namespace
}  // namespace dlrm::fuzz

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  dlrm::fuzz::WriteSeedsIfAsked(argc, argv, dlrm::fuzz::Seeds);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  dlrm::ps::RegisterMessageTypes();
  dlrm::cluster::RegisterMessageTypes();
  dlrm::fuzz::RefusedOrDone([&] {
    const dlrm::net::Message m = dlrm::fuzz::TheCodec().Decode(dlrm::fuzz::SplitFrames(data, size));
    dlrm::fuzz::DecodeAsEveryType(m);
  });
  return 0;
}

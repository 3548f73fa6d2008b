// Compressed communication (issue 16, DistributedConfig.wire_precision): embedding
// gradients and served rows travel in 16 bits, narrowed to nearest, in about half the
// bytes; a decoder refuses data in another precision than the job's, naming it.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "engine/core/status.h"
#include "engine/embedding/half_row.h"
#include "engine/ps/feature_update.h"
#include "engine/ps/messages.h"
#include "tests/support/test_support.h"

namespace dlrm {
namespace {

constexpr auto kFp32 = config::TableConfig::FP32;

std::vector<float> Values(size_t n, double phase) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i)
    v[i] = static_cast<float>(std::sin(phase + 0.37 * static_cast<double>(i))) * 1e-3f;
  return v;
}

std::vector<ps::FeatureUpdate> Updates() {
  ps::FeatureUpdate a;
  a.feature = 2;
  a.lengths = {2, 0, 1};
  a.ids = {7, 3, 9};
  a.weights = {0.5f, 1.0f, 2.0f};
  a.d_pooled = Values(3 * 16, 0.1);
  ps::FeatureUpdate b;
  b.feature = 5;
  b.lengths = {1, 1, 1};
  b.ids = {0, 0, 4};
  b.d_pooled = Values(3 * 16, 2.0);
  return {a, b};
}

TEST(WirePrecision, FeatureUpdatesTravelIn16BitsNarrowedToNearest) {
  const std::vector<ps::FeatureUpdate> updates = Updates();
  const std::string fp32 = ps::EncodeFeatureUpdates(updates);
  for (auto wire : {config::TableConfig::BF16, config::TableConfig::FP16}) {
    const std::string half = ps::EncodeFeatureUpdates(updates, wire);
    // 96 gradient values: 192 bytes fewer, all else as it was.
    EXPECT_EQ(fp32.size() - half.size(), 96u * 2);
    const std::vector<ps::FeatureUpdate> back = ps::DecodeFeatureUpdates(half);
    ASSERT_EQ(back.size(), updates.size());
    for (size_t i = 0; i < updates.size(); ++i) {
      EXPECT_EQ(back[i].feature, updates[i].feature);
      EXPECT_EQ(back[i].ids, updates[i].ids);
      EXPECT_EQ(back[i].weights, updates[i].weights);
      std::vector<float> want = updates[i].d_pooled;
      RoundToHalf(want.data(), static_cast<int64_t>(want.size()), wire);
      EXPECT_EQ(back[i].d_pooled, want);
      EXPECT_NE(back[i].d_pooled, updates[i].d_pooled);
    }
  }
  EXPECT_EQ(ps::DecodeFeatureUpdates(fp32)[1].d_pooled, updates[1].d_pooled);
}

// Ids below 2^32 travel as 32-bit words (one width byte per array); one that does not
// fit sends its array at 64 bits. Both decode to the same ids, and FeatureUpdatesBytes
// (what a trainer counts as sent) is the encoded size either way.
TEST(WirePrecision, FeatureUpdateIdsTravelIn32BitsWhenTheyFit) {
  std::vector<ps::FeatureUpdate> updates = Updates();
  for (auto wire : {kFp32, config::TableConfig::BF16}) {
    const std::string narrow = ps::EncodeFeatureUpdates(updates, wire);
    EXPECT_EQ(static_cast<int64_t>(narrow.size()), ps::FeatureUpdatesBytes(updates, wire));
    std::vector<ps::FeatureUpdate> wide_updates = updates;
    wide_updates[0].ids[1] = int64_t{1} << 40;
    const std::string wide = ps::EncodeFeatureUpdates(wide_updates, wire);
    EXPECT_EQ(static_cast<int64_t>(wide.size()), ps::FeatureUpdatesBytes(wide_updates, wire));
    EXPECT_EQ(wide.size() - narrow.size(), 3u * 4);  // update 0's three ids, 4 bytes more each
    EXPECT_EQ(ps::DecodeFeatureUpdates(narrow)[0].ids, updates[0].ids);
    EXPECT_EQ(ps::DecodeFeatureUpdates(wide)[0].ids, wide_updates[0].ids);
    EXPECT_EQ(ps::DecodeFeatureUpdates(wide)[1].ids, updates[1].ids);
  }
}

// A LOOKUP's ids travel as a U32 payload when every one fits, else as I64; both decode
// to the same ids, and a payload of another dtype is refused naming what was expected.
TEST(WirePrecision, LookupIdsTravelIn32BitsWhenTheyFit) {
  EXPECT_EQ(ps::LookupIdBytes(4294967295), 4);
  EXPECT_EQ(ps::LookupIdBytes(4294967296), 8);
  std::vector<ps::ShardRows> request(2);
  request[0].shard = 0;
  request[0].ids = {7, 3, 9};
  request[1].shard = 1;
  request[1].ids = {4294967295};
  for (const int64_t last : {int64_t{4294967295}, int64_t{1} << 40}) {
    request[1].ids[0] = last;
    const net::Message m = ps::EncodeLookup(1, request);
    EXPECT_EQ(m.payloads[2].dtype(),
              last <= 4294967295 ? net::PayloadDescriptor::U32 : net::PayloadDescriptor::I64);
    EXPECT_EQ(m.payloads[2].count(), 4);
    const std::vector<ps::ShardRows> back = ps::DecodeLookup(m);
    ASSERT_EQ(back.size(), 2u);
    EXPECT_EQ(back[0].ids, request[0].ids);
    EXPECT_EQ(back[1].ids, request[1].ids);
  }
  net::Message forged = ps::EncodeLookup(1, request);
  forged.payloads[2] = net::Payload::Copy(std::vector<float>(4, 0.0f));
  testing::ExpectError([&] { ps::DecodeLookup(forged); }, StatusCode::kDataLoss,
                       "LOOKUP payload 2 is F32, expected I64");
}

TEST(WirePrecision, AnUnknownWirePrecisionIsDataLoss) {
  std::string bytes = ps::EncodeFeatureUpdates(Updates());
  bytes[8] = 7;  // after the u64 count
  testing::ExpectError([&] { ps::DecodeFeatureUpdates(bytes); }, StatusCode::kDataLoss,
                       "wire precision 7 is not FP32 (0), BF16 (1) or FP16 (2)");
}

TEST(WirePrecision, LookupRepliesCarryRowsIn16BitsAndRefuseAnotherPrecision) {
  std::vector<ps::ShardRows> answered(2);
  answered[0].rows = Values(32, 0.3);
  answered[1].rows = Values(16, 1.3);
  const net::Message fp32 = ps::EncodeLookupReply(answered);
  for (auto wire : {config::TableConfig::BF16, config::TableConfig::FP16}) {
    const net::Message half = ps::EncodeLookupReply(answered, wire);
    EXPECT_EQ(half.payloads[1].count(), 48);
    EXPECT_EQ(half.payloads[1].dtype(), net::PayloadDescriptor::U16);
    std::vector<ps::ShardRows> request(2);
    ps::DecodeLookupReply(half, &request, wire);
    for (size_t i = 0; i < request.size(); ++i) {
      std::vector<float> want = answered[i].rows;
      RoundToHalf(want.data(), static_cast<int64_t>(want.size()), wire);
      EXPECT_EQ(request[i].rows, want);
    }
    testing::ExpectError([&] { ps::DecodeLookupReply(fp32, &request, wire); },
                         StatusCode::kDataLoss, "LOOKUP_REPLY payload 1 is F32, expected U16");
    testing::ExpectError([&] { ps::DecodeLookupReply(half, &request, kFp32); },
                         StatusCode::kDataLoss, "LOOKUP_REPLY payload 1 is U16, expected F32");
  }
}

}  // namespace
}  // namespace dlrm

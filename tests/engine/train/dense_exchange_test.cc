// The encodings that travel between the trainers of a synchronous step
// (train/dense_exchange.h): what a peer sends decodes to what it meant, and a peer's
// malformed bytes are refused naming the field (tests/fuzz/fuzz_exchange feeds the same
// decoders arbitrary input).
#include "engine/train/dense_exchange.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "engine/core/byte_codec.h"
#include "engine/core/status.h"

namespace dlrm::train {
namespace {

using ::testing::HasSubstr;

std::string Encoded(const Outcome& o) {
  ByteWriter out;
  PutOutcome(o, &out);
  return std::move(out).Take();
}

TEST(OutcomeTest, EveryStatusCodeTravelsWithItsMessage) {
  for (int code = 0; code <= static_cast<int>(StatusCode::kResourceExhausted); ++code) {
    const std::string bytes = Encoded({code, code == 0 ? "" : "why " + std::to_string(code)});
    ByteReader in(bytes, "outcome");
    const Outcome got = GetOutcome(&in);
    in.ExpectEnd();
    EXPECT_EQ(got.code, code);
    EXPECT_EQ(got.error, code == 0 ? "" : "why " + std::to_string(code));
  }
}

// A code that is no StatusCode would reach the C ABI as a dlrm_status no binding knows.
TEST(OutcomeTest, ACodeThatIsNoStatusCodeIsDataLossNamingIt) {
  for (const int32_t code : {12, 999, -1, std::numeric_limits<int32_t>::min()}) {
    const std::string bytes = Encoded({code, "forged"});
    ByteReader in(bytes, "model-parallel input");
    try {
      GetOutcome(&in);
      FAIL() << "code " << code << " was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), StatusCode::kDataLoss);
      EXPECT_THAT(e.what(), HasSubstr("model-parallel input: error code " + std::to_string(code) +
                                      " is not a status code"));
    }
  }
}

TEST(BagsTest, APartsBagsTravelAsTheyAreWithWideAndNarrowIds) {
  for (const int64_t big : {int64_t{7}, int64_t{1} << 40}) {
    OwnedBatch bags;
    bags.batch_size = 3;
    bags.num_sparse = 2;
    bags.lengths = {1, 0, 2, 1, 1, 0};
    bags.ids = {4, big, 0, 9, 2};
    bags.weights = {0.5f, 1, 2, 0.25f, 3};
    ByteWriter out;
    PutBags(bags, &out);
    const std::string bytes = std::move(out).Take();
    ByteReader in(bytes, "bags");
    const OwnedBatch got = GetBags(&in);
    in.ExpectEnd();
    EXPECT_EQ(got.batch_size, 3);
    EXPECT_EQ(got.num_sparse, 2);
    EXPECT_EQ(got.lengths, bags.lengths);
    EXPECT_EQ(got.ids, bags.ids);
    EXPECT_EQ(got.weights, bags.weights);
  }
}

TEST(BagsTest, TruncatedBagsAreDataLossNamingTheField) {
  OwnedBatch bags;
  bags.batch_size = 2;
  bags.num_sparse = 1;
  bags.lengths = {2, 1};
  bags.ids = {1, 2, 3};
  ByteWriter out;
  PutBags(bags, &out);
  const std::string bytes = std::move(out).Take();
  ByteReader in(std::string_view(bytes).substr(0, bytes.size() - 13), "bags");
  try {
    GetBags(&in);
    FAIL() << "truncated bags were accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), StatusCode::kDataLoss);
    EXPECT_THAT(e.what(), HasSubstr("ids"));
  }
}

}  // namespace
}  // namespace dlrm::train

#include "engine/embedding/embedding_table.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "engine/core/philox.h"
#include "engine/core/status.h"

namespace dlrm {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

config::Initializer Uniform(float low, float high) {
  config::Initializer init;
  init.set_kind(config::Initializer::UNIFORM);
  init.set_low(low);
  init.set_high(high);
  return init;
}

config::Initializer Normal(float mean, float stddev) {
  config::Initializer init;
  init.set_kind(config::Initializer::NORMAL);
  init.set_mean(mean);
  init.set_stddev(stddev);
  return init;
}

config::Initializer OfKind(config::Initializer::Kind kind) {
  config::Initializer init;
  init.set_kind(kind);
  return init;
}

template <typename T>
EmbeddingTable<T> MakeTable(int64_t rows, int32_t dim, const config::Initializer& init,
                            uint64_t seed, int32_t table_index) {
  EmbeddingTable<T> table("t", rows, dim);
  table.Initialize(init, seed, table_index);
  return table;
}

struct Moments {
  double mean = 0, stddev = 0, min = 0, max = 0;
};

template <typename T>
Moments MomentsOf(const std::vector<T>& v) {
  Moments m;
  m.min = m.max = v[0];
  for (T x : v) {
    m.mean += x;
    m.min = std::min<double>(m.min, x);
    m.max = std::max<double>(m.max, x);
  }
  m.mean /= static_cast<double>(v.size());
  for (T x : v) m.stddev += (x - m.mean) * (x - m.mean);
  m.stddev = std::sqrt(m.stddev / static_cast<double>(v.size()));
  return m;
}

template <typename T>
class EmbeddingTableTest : public ::testing::Test {};
using Types = ::testing::Types<float, double>;
TYPED_TEST_SUITE(EmbeddingTableTest, Types);

TYPED_TEST(EmbeddingTableTest, ShapeAndStorage) {
  EmbeddingTable<TypeParam> table("clicks", 7, 3);
  EXPECT_EQ(table.name(), "clicks");
  EXPECT_EQ(table.num_rows(), 7);
  EXPECT_EQ(table.dim(), 3);
  ASSERT_EQ(table.data().size(), 21u);
  EXPECT_EQ(table.row(2), table.data().data() + 6);
}

TYPED_TEST(EmbeddingTableTest, InitializingTwiceGivesIdenticalValues) {
  for (const auto& init :
       {OfKind(config::Initializer::DEFAULT), Uniform(-0.5f, 2.0f), Normal(0.25f, 0.5f)}) {
    SCOPED_TRACE(init.ShortDebugString());
    EmbeddingTable<TypeParam> a("t", 50, 5), b("t", 50, 5);
    a.Initialize(init, 42, 3);
    b.Initialize(Uniform(5, 6), 7, 1);  // overwritten by the next call
    b.Initialize(init, 42, 3);
    ASSERT_EQ(std::memcmp(a.data().data(), b.data().data(), a.data().size() * sizeof(TypeParam)),
              0);
  }
}

TYPED_TEST(EmbeddingTableTest, RowDependsOnlyOnSeedTableAndRow) {
  // Counter-based: row 7 of a 10-row table equals row 7 of a 1000-row table.
  for (const auto& init : {Uniform(-0.5f, 2.0f), Normal(0.25f, 0.5f)}) {
    SCOPED_TRACE(init.ShortDebugString());
    const auto small = MakeTable<TypeParam>(10, 6, init, 1234, 2);
    const auto large = MakeTable<TypeParam>(1000, 6, init, 1234, 2);
    for (int64_t r = 0; r < 10; ++r)
      EXPECT_EQ(std::memcmp(small.row(r), large.row(r), 6 * sizeof(TypeParam)), 0) << "row " << r;
  }
}

TYPED_TEST(EmbeddingTableTest, DefaultScalesOneDrawByTableSize) {
  // DEFAULT is uniform(-1/sqrt(n), 1/sqrt(n)) over the same draws: the values scaled by
  // sqrt(n) agree between table sizes.
  const auto init = OfKind(config::Initializer::DEFAULT);
  const auto small = MakeTable<TypeParam>(16, 4, init, 9, 0);
  const auto large = MakeTable<TypeParam>(1600, 4, init, 9, 0);
  for (int64_t r = 0; r < 16; ++r)
    for (int k = 0; k < 4; ++k) EXPECT_NEAR(small.row(r)[k] * 4.0, large.row(r)[k] * 40.0, 1e-5);
}

TYPED_TEST(EmbeddingTableTest, ValueJIsElementJOfTheRowsCounterStream) {
  const auto table = MakeTable<TypeParam>(20, 5, Uniform(-1.0f, 3.0f), 77, 4);
  for (int64_t r : {0, 13, 19}) {
    const CounterRng rng(77, kStreamEmbeddingBase + 4, r);
    for (int j = 0; j < 5; ++j)
      EXPECT_EQ(table.row(r)[j], static_cast<TypeParam>(-1.0 + 4.0 * rng.Uniform(j)));
  }
  const auto normal = MakeTable<TypeParam>(20, 5, Normal(1.0f, 2.0f), 77, 4);
  const CounterRng rng(77, kStreamEmbeddingBase + 4, 13);
  for (int j = 0; j < 5; ++j)
    EXPECT_EQ(normal.row(13)[j], static_cast<TypeParam>(1.0 + 2.0 * rng.Normal(j)));
}

TYPED_TEST(EmbeddingTableTest, SeedAndTableIndexChangeTheValues) {
  const auto init = Uniform(-1, 1);
  const auto base = MakeTable<TypeParam>(30, 4, init, 5, 0);
  const auto other_seed = MakeTable<TypeParam>(30, 4, init, 6, 0);
  const auto other_table = MakeTable<TypeParam>(30, 4, init, 5, 1);
  EXPECT_NE(base.data(), other_seed.data());
  EXPECT_NE(base.data(), other_table.data());
  // Rows and columns draw different numbers too.
  EXPECT_NE(base.row(0)[0], base.row(1)[0]);
  EXPECT_NE(base.row(0)[0], base.row(0)[1]);
}

TYPED_TEST(EmbeddingTableTest, DefaultRange) {
  const int64_t rows = 400;  // bound = 1/sqrt(400) = 0.05
  const auto table = MakeTable<TypeParam>(rows, 16, OfKind(config::Initializer::DEFAULT), 3, 0);
  const Moments m = MomentsOf(table.data());
  EXPECT_GE(m.min, -0.05);
  EXPECT_LE(m.max, 0.05);
  EXPECT_LT(m.min, -0.049);
  EXPECT_GT(m.max, 0.049);
  EXPECT_NEAR(m.mean, 0.0, 0.002);
  EXPECT_NEAR(m.stddev, 0.1 / std::sqrt(12.0), 0.002);
}

TYPED_TEST(EmbeddingTableTest, UniformRange) {
  const auto table = MakeTable<TypeParam>(1000, 10, Uniform(1.0f, 3.0f), 11, 2);
  const Moments m = MomentsOf(table.data());
  EXPECT_GE(m.min, 1.0);
  EXPECT_LE(m.max, 3.0);
  EXPECT_LT(m.min, 1.01);
  EXPECT_GT(m.max, 2.99);
  EXPECT_NEAR(m.mean, 2.0, 0.03);
  EXPECT_NEAR(m.stddev, 2.0 / std::sqrt(12.0), 0.02);
}

TYPED_TEST(EmbeddingTableTest, NormalMoments) {
  const auto table = MakeTable<TypeParam>(1000, 20, Normal(0.5f, 2.0f), 11, 2);
  const Moments m = MomentsOf(table.data());
  EXPECT_NEAR(m.mean, 0.5, 0.05);
  EXPECT_NEAR(m.stddev, 2.0, 0.05);
  const auto degenerate = MakeTable<TypeParam>(10, 3, Normal(0.5f, 0.0f), 11, 2);
  for (TypeParam x : degenerate.data()) EXPECT_EQ(x, TypeParam(0.5));
}

TYPED_TEST(EmbeddingTableTest, ZerosOverwritesEverything) {
  EmbeddingTable<TypeParam> table("t", 10, 3);
  table.Initialize(Uniform(1, 2), 1, 0);
  table.Initialize(OfKind(config::Initializer::ZEROS), 1, 0);
  for (TypeParam x : table.data()) EXPECT_EQ(x, TypeParam(0));
}

// Runs fn, which must throw dlrm::Error with kInvalidArgument; returns its message.
template <typename Fn>
std::string InvalidArgumentMessage(Fn fn) {
  try {
    fn();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), StatusCode::kInvalidArgument);
    return e.what();
  }
  ADD_FAILURE() << "no dlrm::Error thrown";
  return "";
}

TEST(EmbeddingTableValidation, RejectsBadShapeNamingTableAndField) {
  EXPECT_THAT(InvalidArgumentMessage([] { EmbeddingTable<float>("user_id", 0, 4); }),
              AllOf(HasSubstr("user_id"), HasSubstr("num_rows"), HasSubstr("got 0")));
  EXPECT_THAT(InvalidArgumentMessage([] { EmbeddingTable<float>("user_id", -3, 4); }),
              AllOf(HasSubstr("user_id"), HasSubstr("num_rows"), HasSubstr("-3")));
  EXPECT_THAT(InvalidArgumentMessage([] { EmbeddingTable<double>("ad_id", 10, 0); }),
              AllOf(HasSubstr("ad_id"), HasSubstr("dim")));
  EXPECT_THAT(InvalidArgumentMessage([] { EmbeddingTable<float>("huge", int64_t{1} << 62, 64); }),
              AllOf(HasSubstr("huge"), HasSubstr("too large")));
}

TEST(EmbeddingTableValidation, RejectsBadInitializerNamingTableAndField) {
  EmbeddingTable<float> table("item", 10, 2);
  EXPECT_THAT(
      InvalidArgumentMessage([&] { table.Initialize(Uniform(0.5f, 0.5f), 1, 0); }),
      AllOf(HasSubstr("item"), HasSubstr("initializer.low"), HasSubstr("initializer.high")));
  EXPECT_THAT(InvalidArgumentMessage([&] { table.Initialize(Uniform(1.0f, -1.0f), 1, 0); }),
              AllOf(HasSubstr("item"), HasSubstr("initializer.low")));
  EXPECT_THAT(InvalidArgumentMessage([&] { table.Initialize(Uniform(NAN, 1.0f), 1, 0); }),
              HasSubstr("initializer.low"));
  EXPECT_THAT(InvalidArgumentMessage([&] { table.Initialize(Normal(0.0f, -0.1f), 1, 0); }),
              AllOf(HasSubstr("item"), HasSubstr("initializer.stddev"), HasSubstr("-0.1")));
  EXPECT_THAT(InvalidArgumentMessage([&] { table.Initialize(Normal(0.0f, NAN), 1, 0); }),
              HasSubstr("initializer.stddev"));
  EXPECT_THAT(InvalidArgumentMessage([&] { table.Initialize(Normal(INFINITY, 1.0f), 1, 0); }),
              HasSubstr("initializer.mean"));
  // A rejected config leaves the table as it was.
  for (float x : table.data()) EXPECT_EQ(x, 0.0f);
}

}  // namespace
}  // namespace dlrm

namespace dlrm {
namespace {

// A DYNAMIC table's row starts from values drawn for its id: the same in whichever row it
// lands, different for another id (ids differing only in their top bits included) and
// for another table index, and from the initializer's distribution.
TEST(EmbeddingTableIdTest, AnIdDrawsTheSameRowWhereverItLands) {
  const config::Initializer init = Uniform(-0.5f, 0.5f);
  EmbeddingTable<float> a("a", 8, 16), b("b", 8, 16);
  const int64_t id = -1234567890123LL, high = id ^ (int64_t{1} << 60);
  a.InitializeForIds(init, 7, 2, {{id, 1}, {high, 2}});
  b.InitializeForIds(init, 7, 2, {{id, 5}});
  EXPECT_EQ(std::memcmp(a.row(1), b.row(5), 16 * sizeof(float)), 0);
  EXPECT_NE(std::memcmp(a.row(1), a.row(2), 16 * sizeof(float)), 0);
  b.InitializeForIds(init, 7, 3, {{id, 0}});
  EXPECT_NE(std::memcmp(a.row(1), b.row(0), 16 * sizeof(float)), 0);
  for (int j = 0; j < 16; ++j) {
    EXPECT_GE(a.row(1)[j], -0.5f);
    EXPECT_LT(a.row(1)[j], 0.5f);
  }
  b.InitializeForIds(OfKind(config::Initializer::ZEROS), 7, 3, {{id, 0}});
  EXPECT_EQ(b.row(0)[0], 0.0f);
}

}  // namespace
}  // namespace dlrm

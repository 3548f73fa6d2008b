// Core utilities: Philox known answers, the counter RNG's independence from call order,
// the thread pool, fixed-order reduction, metrics.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <numeric>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "engine/core/byte_codec.h"
#include "engine/core/cpu_features.h"
#include "engine/core/finite.h"
#include "engine/core/metrics.h"
#include "engine/core/parallel_copy.h"
#include "engine/core/philox.h"
#include "engine/core/radix_sort.h"
#include "engine/core/status.h"
#include "engine/core/thread_pool.h"
#include "engine/core/tree_reduce.h"

namespace dlrm {
namespace {

// Row ids travel as 32-bit words when every one fits, else as 64-bit ones; a width byte
// says which, and the reader gives back the same int64 values.
TEST(ByteCodecTest, IndicesTravelNarrowWhenTheyFitAndComeBackExact) {
  const std::vector<std::vector<int64_t>> cases = {
      {}, {0, 5, 4294967295}, {0, int64_t{1} << 32}, {3, -1}, {int64_t{1} << 62}};
  const std::vector<size_t> widths = {4, 4, 8, 8, 8};
  for (size_t c = 0; c < cases.size(); ++c) {
    ByteWriter out;
    out.PutIndices(cases[c]);
    out.Put<int32_t>(77);  // what follows is read from the right place
    const std::string bytes = std::move(out).Take();
    EXPECT_EQ(bytes.size(), ByteWriter::IndicesBytes(cases[c]) + sizeof(int32_t)) << c;
    EXPECT_EQ(bytes.size(), 1 + 8 + cases[c].size() * widths[c] + 4) << c;
    ByteReader in(bytes, "test");
    std::vector<int64_t> back = {9, 9};
    in.GetIndices("ids", &back);
    EXPECT_EQ(back, cases[c]) << c;
    EXPECT_EQ(in.Get<int32_t>("tail"), 77);
    in.ExpectEnd();
  }
}

TEST(ByteCodecTest, ForgedIndicesAreDataLossNamingTheField) {
  ByteWriter out;
  out.PutIndices({1, 2, 3});
  const std::string bytes = std::move(out).Take();
  const auto expect_refused = [](const std::string& forged, const std::string& needle) {
    try {
      ByteReader in(forged, "feature updates");
      std::vector<int64_t> ids;
      in.GetIndices("ids", &ids);
      ADD_FAILURE() << "read: " << needle;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), StatusCode::kDataLoss);
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  std::string bad_width = bytes;
  bad_width[0] = 3;
  expect_refused(bad_width, "feature updates: ids has index width 3");
  std::string inflated = bytes;
  inflated[1] = 4;  // the count's low byte: 4 ids claimed, 3 present
  expect_refused(inflated, "ids claims 4 values but only 12 bytes remain");
}

TEST(CpuFeaturesTest, MaxIsaCapsTheLevelOnlyWhenNamed) {
  ASSERT_EQ(unsetenv("DLRM_MAX_ISA"), 0);
  EXPECT_EQ(ReadMaxIsa().level, IsaLevel::kAmx);
  EXPECT_EQ(ReadMaxIsa().value, nullptr);
  CheckMaxIsa();
  setenv("DLRM_MAX_ISA", "avx2", 1);
  EXPECT_EQ(ReadMaxIsa().level, IsaLevel::kAvx2);
  CheckMaxIsa();
  setenv("DLRM_MAX_ISA", "portable", 1);
  EXPECT_EQ(ReadMaxIsa().level, IsaLevel::kPortable);
  setenv("DLRM_MAX_ISA", "avx512", 1);  // AVX-512 without AMX's tiles
  EXPECT_EQ(ReadMaxIsa().level, IsaLevel::kAvx512);
  setenv("DLRM_MAX_ISA", "sse9", 1);  // not a level: no cap, and refused by name
  EXPECT_EQ(ReadMaxIsa().level, IsaLevel::kAmx);
  EXPECT_FALSE(ReadMaxIsa().valid);
  try {
    CheckMaxIsa();
    ADD_FAILURE() << "sse9 accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), StatusCode::kInvalidArgument);
    EXPECT_STREQ(e.what(), "DLRM_MAX_ISA must be amx, avx512, avx2 or portable, got 'sse9'");
  }
  IsaLevel parsed = IsaLevel::kAvx2;
  EXPECT_FALSE(ParseIsaLevel("AVX2", &parsed));
  EXPECT_EQ(parsed, IsaLevel::kAvx2);
  EXPECT_TRUE(ParseIsaLevel("avx512", &parsed));
  EXPECT_EQ(parsed, IsaLevel::kAvx512);
  EXPECT_TRUE(ParseIsaLevel("amx", &parsed));
  EXPECT_EQ(parsed, IsaLevel::kAmx);
  unsetenv("DLRM_MAX_ISA");
  // The process's level is fixed at first use and is one the CPU supports.
  const IsaLevel level = CpuIsaLevel();
  EXPECT_EQ(CpuHasAvx512(), level >= IsaLevel::kAvx512);
  EXPECT_TRUE(level != IsaLevel::kAmx || CpuOffersAmxBf16());
  // AMX's bf16 GEMM needs AVX512-BF16 and the tile state Linux grants.
  EXPECT_TRUE(!CpuHasAmxBf16() || (CpuHasAvx512Bf16() && AmxTilesGranted()));
  EXPECT_EQ(CpuHasAvx2Fma(), level != IsaLevel::kPortable);
  EXPECT_STREQ(IsaLevelName(IsaLevel::kAvx2), "avx2");
}

// Known-answer vectors of Philox4x32-10 from the Random123 distribution (kat_vectors).
// RadixSort orders as std::stable_sort does: signed ids through SignedKey (negatives and
// the extremes included), narrow keys whose high digits every key shares (passes skipped),
// equal keys in their input order; and an empty or one-element input is left alone.
TEST(RadixSortTest, OrdersAsAStableSortForSignedAndNarrowKeys) {
  const CounterRng rng(3, 1, 0);
  std::vector<std::pair<int64_t, int>> wide, narrow;
  for (int i = 0; i < 5000; ++i) {
    const auto bits = static_cast<uint64_t>(rng.Uniform(2 * i) * 4294967296.0) << 32 |
                      static_cast<uint64_t>(rng.Uniform(2 * i + 1) * 4294967296.0);
    wide.emplace_back(static_cast<int64_t>(bits) >> (i % 3 == 0 ? 40 : 0), i);
    narrow.emplace_back(static_cast<int64_t>(bits % 1000), i);  // many equal keys
  }
  wide.emplace_back(std::numeric_limits<int64_t>::min(), -1);
  wide.emplace_back(std::numeric_limits<int64_t>::max(), -2);
  const auto by_id = [](const auto& a, const auto& b) { return a.first < b.first; };
  for (auto* v : {&wide, &narrow}) {
    auto want = *v;
    std::stable_sort(want.begin(), want.end(), by_id);
    std::vector<std::pair<int64_t, int>> scratch(v->size());
    const bool signed_ids = v == &wide;
    RadixSort(v->data(), scratch.data(), static_cast<int64_t>(v->size()), signed_ids ? 64 : 10,
              [signed_ids](const std::pair<int64_t, int>& e) {
                return signed_ids ? SignedKey(e.first) : static_cast<uint64_t>(e.first);
              });
    EXPECT_EQ(*v, want);
  }
  std::vector<int64_t> one = {7}, none;
  RadixSort(one.data(), none.data(), 1, 64, SignedKey);
  RadixSort(none.data(), none.data(), 0, 64, SignedKey);
  EXPECT_EQ(one, std::vector<int64_t>{7});
}

TEST(PhiloxTest, MatchesRandom123KnownAnswers) {
  EXPECT_EQ(Philox4x32(0, 0, 0),
            (std::array<uint32_t, 4>{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}));
  EXPECT_EQ(Philox4x32(~0ull, ~0ull, ~0ull),
            (std::array<uint32_t, 4>{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}));
  // counter (243f6a88 85a308d3 13198a2e 03707344), key (a4093822 299f31d0)
  EXPECT_EQ(Philox4x32(0x299f31d0a4093822ull, 0x0370734413198a2eull, 0x85a308d3243f6a88ull),
            (std::array<uint32_t, 4>{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}));
}

TEST(CounterRngTest, ValueDependsOnlyOnAddress) {
  const CounterRng a(42, 7, 1000), b(42, 7, 1000), other_row(42, 7, 1001), other_seed(43, 7, 1000);
  std::vector<double> forward, backward(64);
  for (uint64_t j = 0; j < 64; ++j) forward.push_back(a.Uniform(j));
  for (uint64_t j = 64; j-- > 0;) backward[j] = b.Uniform(j);
  EXPECT_EQ(forward, backward);
  EXPECT_NE(forward[0], other_row.Uniform(0));
  EXPECT_NE(forward[0], other_seed.Uniform(0));
  double sum = 0, sum_sq = 0;
  const int n = 20000;
  for (int j = 0; j < n; ++j) {
    const double u = a.Uniform(j);
    ASSERT_GT(u, 0.0);
    ASSERT_LT(u, 1.0);
    const double z = a.Normal(j);
    sum += z;
    sum_sq += z * z;
  }
  EXPECT_NEAR(sum / n, 0.0, 0.03);
  EXPECT_NEAR(sum_sq / n, 1.0, 0.05);
}

TEST(ThreadPoolTest, RunsEveryIndexOnceAndPropagatesErrors) {
  for (int threads : {1, 2, 4}) {
    ThreadPool pool(threads);
    std::vector<std::atomic<int>> hits(1000);
    pool.ParallelFor(1000, [&](int64_t i) { hits[i]++; });
    for (auto& h : hits) ASSERT_EQ(h.load(), 1);
    EXPECT_THROW(pool.ParallelFor(100,
                                  [](int64_t i) {
                                    if (i == 37) throw std::runtime_error("boom");
                                  }),
                 std::runtime_error);
    pool.ParallelFor(0, [](int64_t) { FAIL(); });
  }
}

TEST(ThreadPoolTest, ConcurrentCallersShareThePool) {
  ThreadPool pool(3);
  std::vector<std::thread> callers;
  std::atomic<int64_t> total{0};
  for (int c = 0; c < 4; ++c)
    callers.emplace_back([&] {
      for (int rep = 0; rep < 50; ++rep) pool.ParallelFor(64, [&](int64_t i) { total += i; });
    });
  for (auto& t : callers) t.join();
  EXPECT_EQ(total.load(), 4 * 50 * (63 * 64 / 2));
}

// Sizes of one element, of one slice and of many, on 1 to 3 threads: every element copied
// once (or converted, ids narrowed as the CUDA backend pins them), nothing past the end.
TEST(ParallelCopyTest, CopiesAndConvertsEveryElementOnce) {
  for (const int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    for (const size_t count : {size_t{1}, kCopySliceBytes / 8, 3 * kCopySliceBytes / 8 + 5}) {
      std::vector<int64_t> from(count);
      for (size_t i = 0; i < count; ++i)
        from[i] = static_cast<int64_t>(i * 2654435761u % 4000000000u);
      std::vector<int64_t> wide(count + 1, -1);
      std::vector<uint32_t> narrow(count + 1, 7);
      CopyInParallel(&pool, from.data(), count, wide.data());
      CopyInParallel(threads == 1 ? nullptr : &pool, from.data(), count, narrow.data());
      for (size_t i = 0; i < count; ++i) {
        ASSERT_EQ(wide[i], from[i]) << i;
        ASSERT_EQ(narrow[i], static_cast<uint32_t>(from[i])) << i;
      }
      EXPECT_EQ(wide[count], -1);
      EXPECT_EQ(narrow[count], 7u);
    }
  }
}

TEST(SplitTest, RangesCoverExactly) {
  for (int64_t n : {0, 1, 7, 100}) {
    for (int64_t parts : {1, 3, 8}) {
      EXPECT_EQ(SplitBegin(n, parts, 0), 0);
      EXPECT_EQ(SplitBegin(n, parts, parts), n);
      for (int64_t p = 0; p < parts; ++p)
        EXPECT_LE(SplitBegin(n, parts, p), SplitBegin(n, parts, p + 1));
    }
  }
}

TEST(TreeReduceTest, FixedAssociationRegardlessOfThreads) {
  // Values chosen so that a different association gives a different float.
  const size_t chunks = 7, count = 10000;
  std::vector<std::vector<float>> base(chunks, std::vector<float>(count));
  for (size_t c = 0; c < chunks; ++c)
    for (size_t e = 0; e < count; ++e)
      base[c][e] = std::ldexp(1.0f + 0.37f * c + 1e-3f * e, int(c * 5) - 12);
  std::vector<float> reference;
  for (int threads : {1, 2, 4}) {
    auto copy = base;
    std::vector<float*> ptrs;
    for (auto& v : copy) ptrs.push_back(v.data());
    ThreadPool pool(threads);
    TreeReduceInto(ptrs, count, &pool);
    if (reference.empty()) {
      reference = copy[0];
      // ((p0+p1)+(p2+p3)) + ((p4+p5)+p6)
      for (size_t e = 0; e < count; ++e) {  // every element: the blocks' edges too
        const float expect = ((base[0][e] + base[1][e]) + (base[2][e] + base[3][e])) +
                             ((base[4][e] + base[5][e]) + base[6][e]);
        ASSERT_EQ(reference[e], expect) << e;
      }
    } else {
      ASSERT_EQ(copy[0], reference) << threads;
    }
  }
}

TEST(MetricsTest, AucCountsTiesAsHalf) {
  // Positives at scores 0.9 and 0.5 (tied with a negative), negatives 0.5 and 0.1.
  EXPECT_DOUBLE_EQ(RocAuc({0.9, 0.5, 0.5, 0.1}, {1, 1, 0, 0}), (2 + 1.5) / 4);
  EXPECT_DOUBLE_EQ(RocAuc({0.1, 0.2, 0.3}, {0, 0, 1}), 1.0);
  EXPECT_DOUBLE_EQ(RocAuc({0.1, 0.2, 0.3}, {1, 0, 0}), 0.0);
  EXPECT_TRUE(std::isnan(RocAuc({0.1, 0.2}, {1, 1})));
  EXPECT_THROW(RocAuc({0.1}, {1, 0}), Error);
}

// Found by capi_fuzz_test: a model whose predictions are NaN made evaluate hang (a NaN's
// run of ties never ended). A NaN score has no rank: the AUC is NaN.
TEST(MetricsTest, AucOfNanScoresIsNanAndReturns) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  EXPECT_TRUE(std::isnan(RocAuc({0.9, nan, 0.1}, {1, 0, 0})));
  EXPECT_TRUE(std::isnan(RocAuc({nan, nan}, {1, 0})));
}

TEST(MetricsTest, LogLossIsMeanCrossEntropy) {
  EXPECT_NEAR(LogLoss({0.8, 0.3}, {1, 0}), -(std::log(0.8) + std::log(0.7)) / 2, 1e-12);
  EXPECT_LT(LogLoss({1.0, 0.0}, {0, 1}), 30);  // clamped, finite
}

template <typename T>
void ExpectFiniteCheck() {
  using Limits = std::numeric_limits<T>;
  std::vector<T> values = {
      T(0), -T(0), T(1.5), Limits::max(), Limits::lowest(), Limits::denorm_min(), Limits::min()};
  EXPECT_TRUE(AllFinite(values));
  EXPECT_TRUE(AllFinite(std::vector<T>{}));
  for (const T bad : {Limits::infinity(), -Limits::infinity(), Limits::quiet_NaN(),
                      -Limits::quiet_NaN(), Limits::signaling_NaN()}) {
    for (const size_t at : {size_t{0}, size_t{3}, values.size() - 1}) {
      std::vector<T> with_bad = values;
      with_bad[at] = bad;
      EXPECT_FALSE(AllFinite(with_bad)) << bad << " at " << at;
    }
  }
}

TEST(FiniteTest, FindsEveryInfinityAndNaNWherever) {
  ExpectFiniteCheck<float>();
  ExpectFiniteCheck<double>();
}

TEST(StatusTest, ErrorsCarryCodeAndMessage) {
  try {
    ThrowInvalid("field x must be > ", 3, ", got ", -1);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), StatusCode::kInvalidArgument);
    EXPECT_STREQ(e.what(), "field x must be > 3, got -1");
  }
  EXPECT_STREQ(StatusCodeName(StatusCode::kDataLoss), "DATA_LOSS");
}

}  // namespace
}  // namespace dlrm

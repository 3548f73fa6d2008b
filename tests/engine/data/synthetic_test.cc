#include "engine/data/synthetic.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "engine/core/metrics.h"
#include "engine/core/philox.h"
#include "engine/core/status.h"
#include "engine/data/criteo_tsv.h"
#include "tests/support/test_support.h"

namespace dlrm {
namespace {

using ::testing::HasSubstr;

// Criteo-shaped: 13 dense features, 26 categorical features of a few thousand ids.
SyntheticSpec CriteoLikeSpec(uint64_t seed = 7) {
  SyntheticSpec spec;
  spec.seed = seed;
  for (int f = 0; f < 26; ++f) spec.cardinalities.push_back(1000 + 331 * f);
  return spec;
}

// One categorical feature and nothing else: cheap samples for distribution tests.
SyntheticSpec ZipfOnlySpec(int64_t n, double s) {
  SyntheticSpec spec;
  spec.seed = 3;
  spec.num_dense = 0;
  spec.latent_dim = 0;
  spec.cardinalities = {n};
  spec.zipf_exponent = s;
  return spec;
}

void ExpectSameSample(const SyntheticSample& a, const SyntheticSample& b) {
  EXPECT_EQ(a.label, b.label);
  EXPECT_EQ(a.dense_counts, b.dense_counts);
  EXPECT_EQ(a.ids, b.ids);
  EXPECT_EQ(a.probability, b.probability);
}

TEST(SyntheticTest, SameSeedGivesIdenticalSamples) {
  const SyntheticGenerator a(CriteoLikeSpec(11)), b(CriteoLikeSpec(11)), c(CriteoLikeSpec(12));
  int differing = 0;
  for (int64_t i : {0, 1, 2, 1000, 123456789}) {
    SCOPED_TRACE(i);
    ExpectSameSample(a.Sample(i), b.Sample(i));
    differing += a.Sample(i).ids != c.Sample(i).ids;
  }
  EXPECT_GT(differing, 0) << "a different seed should give different samples";
}

// raw_ids changes only the ids, each through RawId: the same labels and dense values, so
// FIXED and DYNAMIC tables train on the same samples; RawId spreads ids over the int64
// range and sends distinct ids (of one feature) to distinct raw ids.
TEST(SyntheticTest, RawIdsAreTheSameSamplesWithIdsMapped) {
  SyntheticSpec raw_spec = CriteoLikeSpec(3);
  raw_spec.raw_ids = true;
  const SyntheticGenerator indexed(CriteoLikeSpec(3)), raw(raw_spec);
  bool negative = false;
  for (int64_t i = 0; i < 200; ++i) {
    const SyntheticSample a = indexed.Sample(i), b = raw.Sample(i);
    EXPECT_EQ(a.label, b.label);
    EXPECT_EQ(a.dense_counts, b.dense_counts);
    for (size_t f = 0; f < a.ids.size(); ++f) {
      EXPECT_EQ(b.ids[f], RawId(a.ids[f], static_cast<int32_t>(f)));
      negative |= b.ids[f] < 0;
    }
  }
  EXPECT_TRUE(negative) << "raw ids cover the negative half too";
  std::set<int64_t> seen;
  for (int64_t id = 0; id < 100000; ++id) seen.insert(RawId(id, 4));
  EXPECT_EQ(seen.size(), 100000u);
  EXPECT_NE(RawId(7, 0), RawId(7, 1));
}

TEST(SyntheticTest, SampleShapesAndRanges) {
  const SyntheticSpec spec = CriteoLikeSpec();
  const SyntheticGenerator gen(spec);
  for (int64_t i = 0; i < 500; ++i) {
    const SyntheticSample s = gen.Sample(i);
    ASSERT_EQ(s.dense_counts.size(), 13u);
    ASSERT_EQ(s.ids.size(), 26u);
    for (const int64_t c : s.dense_counts) EXPECT_GE(c, 0);
    for (size_t f = 0; f < 26; ++f) {
      EXPECT_GE(s.ids[f], 0);
      EXPECT_LT(s.ids[f], spec.cardinalities[f]);
    }
    EXPECT_GT(s.probability, 0.0);
    EXPECT_LT(s.probability, 1.0);
    EXPECT_TRUE(s.label == 0.0f || s.label == 1.0f);
  }
}

TEST(SyntheticTest, GenerateRangeAgreesWithSample) {
  const SyntheticGenerator gen(CriteoLikeSpec());
  const int64_t first = 100, count = 37;
  std::vector<double> probabilities;
  const OwnedBatch batch = gen.Generate(first, count, &probabilities);
  ASSERT_EQ(batch.batch_size, count);
  ASSERT_EQ(batch.num_dense, 13);
  ASSERT_EQ(batch.num_sparse, 26);
  ASSERT_EQ(batch.dense.size(), static_cast<size_t>(count * 13));
  ASSERT_EQ(batch.lengths, std::vector<int32_t>(static_cast<size_t>(count * 26), 1));
  ASSERT_EQ(batch.ids.size(), static_cast<size_t>(count * 26));
  ASSERT_EQ(probabilities.size(), static_cast<size_t>(count));
  EXPECT_TRUE(batch.weights.empty());
  for (int64_t b = 0; b < count; ++b) {
    const SyntheticSample s = gen.Sample(first + b);
    EXPECT_EQ(batch.labels[b], s.label);
    EXPECT_EQ(probabilities[b], s.probability);
    for (int j = 0; j < 13; ++j) {
      const double c = static_cast<double>(s.dense_counts[j]);
      EXPECT_EQ(batch.dense[b * 13 + j], c > 0 ? static_cast<float>(std::log1p(c)) : 0.0f);
    }
    for (int f = 0; f < 26; ++f) EXPECT_EQ(batch.ids[f * count + b], s.ids[f]);
  }
  // A sub-range generated on its own is the same data.
  const OwnedBatch tail = gen.Generate(first + 30, 7, nullptr);
  for (int64_t b = 0; b < 7; ++b) EXPECT_EQ(tail.labels[b], batch.labels[30 + b]);
  for (int f = 0; f < 26; ++f) {
    for (int64_t b = 0; b < 7; ++b) EXPECT_EQ(tail.ids[f * 7 + b], batch.ids[f * count + 30 + b]);
  }
}

// Counts of each id over `draws` samples, most frequent first.
std::vector<std::pair<int64_t, int64_t>> IdCountsByFrequency(const SyntheticGenerator& gen,
                                                             int64_t draws) {
  std::map<int64_t, int64_t> counts;
  const int64_t n = gen.spec().cardinalities[0];
  for (int64_t i = 0; i < draws; ++i) {
    const int64_t id = gen.Sample(i).ids[0];
    EXPECT_GE(id, 0);
    EXPECT_LT(id, n);
    ++counts[id];
  }
  std::vector<std::pair<int64_t, int64_t>> by_count;  // (count, id)
  for (const auto& [id, c] : counts) by_count.emplace_back(c, id);
  std::sort(by_count.rbegin(), by_count.rend());
  return by_count;
}

double ZipfProbability(int64_t rank, int64_t n, double s) {
  double norm = 0;
  for (int64_t k = n; k >= 1; --k) norm += std::pow(static_cast<double>(k), -s);
  return std::pow(static_cast<double>(rank), -s) / norm;
}

TEST(SyntheticTest, ZipfFrequenciesFollowPowerLaw) {
  constexpr int64_t kDraws = 200000;
  for (const double s : {0.8, 1.0, 1.2}) {
    SCOPED_TRACE(s);
    const int64_t n = 1000;
    const auto by_count = IdCountsByFrequency(SyntheticGenerator(ZipfOnlySpec(n, s)), kDraws);
    ASSERT_GE(by_count.size(), 4u);
    const double c1 = static_cast<double>(by_count[0].first);
    EXPECT_NEAR(c1 / by_count[1].first, std::pow(2.0, s), 0.08 * std::pow(2.0, s));
    EXPECT_NEAR(c1 / by_count[3].first, std::pow(4.0, s), 0.12 * std::pow(4.0, s));
    const double p1 = ZipfProbability(1, n, s);
    EXPECT_NEAR(c1 / kDraws, p1, 5 * std::sqrt(p1 * (1 - p1) / kDraws));
  }
}

TEST(SyntheticTest, ZipfOverHugeTableStaysInRangeAndSpreadsHotIds) {
  constexpr int64_t kDraws = 200000;
  const int64_t n = 100000000;  // 1e8: no per-id table could be afforded
  const auto by_count = IdCountsByFrequency(SyntheticGenerator(ZipfOnlySpec(n, 1.05)), kDraws);
  ASSERT_GE(by_count.size(), 10u);
  EXPECT_NEAR(static_cast<double>(by_count[0].first) / by_count[1].first, std::pow(2.0, 1.05),
              0.1 * std::pow(2.0, 1.05));
  // The scramble moves hot ids away from the start of the table and from each other.
  int64_t min_gap = n;
  for (int a = 0; a < 10; ++a) {
    for (int b = a + 1; b < 10; ++b)
      min_gap = std::min(min_gap, std::abs(by_count[a].second - by_count[b].second));
  }
  EXPECT_GT(min_gap, 100);
  int64_t max_hot_id = 0;
  for (int a = 0; a < 10; ++a) max_hot_id = std::max(max_hot_id, by_count[a].second);
  EXPECT_GT(max_hot_id, n / 100);
}

TEST(SyntheticTest, TinyTablesWork) {
  for (const int64_t n : {1, 2, 3}) {
    const SyntheticGenerator gen(ZipfOnlySpec(n, 1.2));
    for (int64_t i = 0; i < 2000; ++i) {
      const int64_t id = gen.Sample(i).ids[0];
      ASSERT_GE(id, 0);
      ASSERT_LT(id, n);
    }
  }
}

TEST(SyntheticTest, DefaultsGiveCriteoLikeRateAndAuc) {
  const SyntheticGenerator gen(CriteoLikeSpec());
  constexpr int64_t kCount = 20000;
  std::vector<double> probabilities;
  const OwnedBatch batch = gen.Generate(0, kCount, &probabilities);
  double label_mean = 0, probability_mean = 0;
  for (int64_t i = 0; i < kCount; ++i) {
    label_mean += batch.labels[i];
    probability_mean += probabilities[i];
  }
  label_mean /= kCount;
  probability_mean /= kCount;
  // Labels are Bernoulli(p): their mean is the mean probability up to sampling noise.
  EXPECT_NEAR(label_mean, probability_mean,
              4 * std::sqrt(probability_mean * (1 - probability_mean) / kCount));
  EXPECT_GT(label_mean, 0.25);
  EXPECT_LT(label_mean, 0.35);
  const double auc = RocAuc(probabilities, batch.labels);
  EXPECT_GT(auc, 0.75);
  EXPECT_LT(auc, 0.85);
}

TEST(SyntheticTest, BaseRateFollowsBiasForEverySeed) {
  for (const uint64_t seed : {1, 2, 3}) {
    SyntheticSpec spec = CriteoLikeSpec(seed);
    spec.bias = -2.5;
    const SyntheticGenerator gen(spec);
    std::vector<double> probabilities;
    gen.Generate(0, 5000, &probabilities);
    double mean = 0;
    for (const double p : probabilities) mean += p;
    mean /= 5000;
    EXPECT_GT(mean, 0.08) << "seed " << seed;
    EXPECT_LT(mean, 0.16) << "seed " << seed;
  }
}

TEST(SyntheticTest, TrueProbabilitiesBeatNoisyOnes) {
  const SyntheticGenerator gen(CriteoLikeSpec());
  constexpr int64_t kCount = 20000;
  std::vector<double> probabilities;
  const OwnedBatch batch = gen.Generate(0, kCount, &probabilities);
  // Noise on the logit scale, from a stream the generator does not use.
  std::vector<double> noisy(probabilities.size());
  for (size_t i = 0; i < noisy.size(); ++i) {
    const double p = probabilities[i];
    noisy[i] = std::log(p / (1 - p)) + CounterRng(99, 12345, i).Normal(0);
  }
  const double bayes = RocAuc(probabilities, batch.labels);
  const double degraded = RocAuc(noisy, batch.labels);
  EXPECT_GT(bayes, 0.7);
  EXPECT_GT(bayes, degraded + 0.02);
  EXPECT_GT(degraded, 0.5);
}

TEST(SyntheticTest, WriteTsvRoundTripsThroughCriteoReader) {
  const SyntheticSpec spec = CriteoLikeSpec();
  const SyntheticGenerator gen(spec);
  const std::string path = testing::TempDir("synthetic_tsv") + "/day.tsv";
  const int64_t first = 50, count = 2500;  // several chunks of parallel formatting
  const double auc = gen.WriteTsv(path, first, count);

  std::vector<double> probabilities;
  const OwnedBatch expected = gen.Generate(first, count, &probabilities);
  EXPECT_EQ(auc, RocAuc(probabilities, expected.labels));

  CriteoOptions options;
  options.batch_size = 128;
  options.table_rows = spec.cardinalities;
  CriteoTsvReader reader(path, options);
  OwnedBatch batch;
  int64_t row = 0;
  while (reader.Next(&batch)) {
    const int64_t b_size = batch.batch_size;
    for (int64_t b = 0; b < b_size; ++b, ++row) {
      ASSERT_LT(row, count);
      EXPECT_EQ(batch.labels[b], expected.labels[row]);
      for (int j = 0; j < 13; ++j) EXPECT_EQ(batch.dense[b * 13 + j], expected.dense[row * 13 + j]);
      for (int f = 0; f < 26; ++f) {
        EXPECT_EQ(batch.lengths[f * b_size + b], 1);
        EXPECT_EQ(batch.ids[f * b_size + b], expected.ids[f * count + row]);
      }
    }
  }
  EXPECT_EQ(row, count);
  EXPECT_EQ(reader.lines_skipped(), 0);
}

TEST(SyntheticTest, WriteTsvIdsAreLowercaseHex) {
  const SyntheticGenerator gen(CriteoLikeSpec());
  const std::string path = testing::TempDir("synthetic_hex") + "/day.tsv";
  gen.WriteTsv(path, 0, 20);
  std::ifstream in(path);
  std::string line;
  int lines = 0;
  while (std::getline(in, line)) {
    ++lines;
    EXPECT_EQ(std::count(line.begin(), line.end(), '\t'), 39);
    EXPECT_EQ(line.find_first_of("ABCDEF"), std::string::npos) << line;
  }
  EXPECT_EQ(lines, 20);
}

void ExpectInvalid(const SyntheticSpec& spec, const std::string& field) {
  try {
    SyntheticGenerator gen(spec);
    ADD_FAILURE() << "accepted bad " << field;
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(e.what(), HasSubstr(field));
  }
}

TEST(SyntheticTest, SpecValidatedNamingField) {
  SyntheticSpec spec = CriteoLikeSpec();
  spec.cardinalities.clear();
  ExpectInvalid(spec, "cardinalities");
  spec = CriteoLikeSpec();
  spec.cardinalities[4] = 0;
  ExpectInvalid(spec, "cardinalities[4]");
  spec = CriteoLikeSpec();
  spec.num_dense = -1;
  ExpectInvalid(spec, "num_dense");
  spec = CriteoLikeSpec();
  spec.latent_dim = -2;
  ExpectInvalid(spec, "latent_dim");
  spec = CriteoLikeSpec();
  spec.zipf_exponent = 0;
  ExpectInvalid(spec, "zipf_exponent");
  spec = CriteoLikeSpec();
  spec.id_effect_scale = std::numeric_limits<double>::quiet_NaN();
  ExpectInvalid(spec, "id_effect_scale");
  spec = CriteoLikeSpec();
  spec.interaction_scale = -1;
  ExpectInvalid(spec, "interaction_scale");
  spec = CriteoLikeSpec();
  spec.bias = std::numeric_limits<double>::infinity();
  ExpectInvalid(spec, "bias");
}

TEST(SyntheticTest, WriteTsvNeedsCriteoShape) {
  const std::string dir = testing::TempDir("synthetic_tsv_shape");
  const auto expect_invalid = [&](const SyntheticSpec& spec, const std::string& field) {
    const SyntheticGenerator gen(spec);
    try {
      gen.WriteTsv(dir + "/x.tsv", 0, 10);
      ADD_FAILURE() << "wrote TSV with bad " << field;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), StatusCode::kInvalidArgument);
      EXPECT_THAT(e.what(), HasSubstr(field));
    }
  };
  SyntheticSpec spec = CriteoLikeSpec();
  spec.num_dense = 12;
  expect_invalid(spec, "num_dense");
  spec = CriteoLikeSpec();
  spec.cardinalities.pop_back();
  expect_invalid(spec, "cardinalities");
  spec = CriteoLikeSpec();
  spec.cardinalities[9] = int64_t{1} << 33;
  expect_invalid(spec, "cardinalities[9]");
}

TEST(SyntheticTest, WriteTsvToMissingDirectoryIsIoError) {
  const SyntheticGenerator gen(CriteoLikeSpec());
  const std::string path = testing::TempDir("synthetic_io") + "/no/such/dir/day.tsv";
  try {
    gen.WriteTsv(path, 0, 5);
    ADD_FAILURE() << "wrote into a missing directory";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), StatusCode::kIo);
    EXPECT_THAT(e.what(), HasSubstr(path));
  }
}

TEST(SyntheticTest, NegativeIndexIsOutOfRange) {
  const SyntheticGenerator gen(CriteoLikeSpec());
  try {
    gen.Sample(-1);
    ADD_FAILURE() << "sampled index -1";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), StatusCode::kOutOfRange);
  }
  EXPECT_THROW(gen.Generate(0, -3, nullptr), Error);
}

}  // namespace
}  // namespace dlrm

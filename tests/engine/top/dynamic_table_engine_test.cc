// The Engine with DYNAMIC tables (issue 14): raw 64-bit ids train as a FIXED table does,
// admissions and evictions are bitwise the same at 1, 2 and 4 threads, a checkpoint
// resumes bitwise, prediction admits nothing, and bad configs and damaged state files
// are refused naming what is wrong.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <map>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "engine/checkpoint/checkpoint_file.h"
#include "engine/config/config.h"
#include "engine/core/status.h"
#include "engine/data/synthetic.h"
#include "engine/engine.h"
#include "tests/support/copying_backend.h"
#include "tests/support/test_support.h"

namespace dlrm {
namespace {

using ::testing::HasSubstr;

const char kFixedT0[] = R"(tables { name: "t0" num_rows: 40 dim: 4 })";
const char kFixedT1[] =
    R"(tables { name: "t1" num_rows: 25 dim: 4 initializer { kind: NORMAL stddev: 0.3 } })";

void Replace(std::string* text, const std::string& from, const std::string& to) {
  const size_t at = text->find(from);
  ASSERT_NE(at, std::string::npos) << from;
  text->replace(at, from.size(), to);
}

// What a parameterized suite varies: the optimizers, and the tables' row precision (text
// put in every table: "" for FP32, or "precision: BF16 rounding: STOCHASTIC").
struct Variant {
  const char* name;
  const char* optimizers;
  const char* rows;
};

// SmallConfigText's model with its two tables replaced ("" keeps one), every table's rows
// as `rows` says.
std::string ConfigText(const std::string& t0, const std::string& t1,
                       const std::string& optimizers = "", int threads = 1,
                       const std::string& rows = "") {
  std::string text = testing::SmallConfigText(optimizers, threads);
  if (!t0.empty()) Replace(&text, kFixedT0, t0);
  if (!t1.empty()) Replace(&text, kFixedT1, t1);
  for (size_t at = text.find("tables { "); at != std::string::npos && !rows.empty();
       at = text.find("tables { ", at + 1))
    text.insert(at + 9, rows + " ");
  return text;
}

std::string ConfigText(const std::string& t0, const std::string& t1, const Variant& v,
                       int threads) {
  return ConfigText(t0, t1, v.optimizers, threads, v.rows);
}

// SmallBatch with each id of a DYNAMIC table replaced by its raw id (features 0 and 2
// share table 0, feature 1 uses table 1).
OwnedBatch RawBatch(const Engine& engine, int64_t batch_size, uint64_t salt, bool weighted) {
  OwnedBatch b = testing::SmallBatch(batch_size, salt, weighted);
  const int32_t table_of_feature[3] = {0, 1, 0};
  size_t i = 0;
  for (int f = 0; f < 3; ++f) {
    const bool dynamic =
        engine.config().model().tables(table_of_feature[f]).kind() == config::TableConfig::DYNAMIC;
    for (int64_t s = 0; s < batch_size; ++s)
      for (int32_t k = 0; k < b.lengths[f * batch_size + s]; ++k, ++i)
        if (dynamic) b.ids[i] = RawId(b.ids[i], table_of_feature[f]);
  }
  return b;
}

std::vector<uint32_t> Train(Engine& engine, int steps, uint64_t first_salt = 0) {
  std::vector<uint32_t> bits;
  for (int s = 0; s < steps; ++s) {
    const uint64_t salt = first_salt + static_cast<uint64_t>(s);
    const OwnedBatch batch = RawBatch(engine, 64, salt, s % 2 == 1);
    const float loss = engine.TrainStep(batch.view());
    uint32_t b;
    std::memcpy(&b, &loss, sizeof b);
    bits.push_back(b);
  }
  return bits;
}

std::map<std::string, std::vector<float>> Params(const Engine& engine) {
  return testing::ParameterValues(engine);
}
using testing::BitwiseEqual;

// A table's rows as byte strings, sorted: equal for two tables holding the same rows in
// any order.
std::vector<std::string> SortedRows(const std::vector<float>& table, int dim) {
  std::vector<std::string> rows;
  for (size_t r = 0; r < table.size(); r += static_cast<size_t>(dim))
    rows.emplace_back(reinterpret_cast<const char*>(table.data() + r), dim * sizeof(float));
  std::sort(rows.begin(), rows.end());
  return rows;
}

bool SameStats(const TableStats& a, const TableStats& b) {
  return a.dynamic == b.dynamic && a.capacity == b.capacity && a.size == b.size &&
         a.counts.lookups == b.counts.lookups && a.counts.hits == b.counts.hits &&
         a.counts.admitted == b.counts.admitted && a.counts.evicted == b.counts.evicted &&
         a.counts.rejected == b.counts.rejected && a.memory_bytes == b.memory_bytes;
}

class DynamicEngineTest : public ::testing::TestWithParam<Variant> {};

// With a row for every id and rows that start equal (ZEROS), a DYNAMIC table is the FIXED
// table with its rows permuted: the same losses bit for bit, the same dense parameters,
// and the same rows in another order. (16-bit rows round to nearest here: stochastic
// rounding's bits follow the row index, which the permutation changes.)
TEST_P(DynamicEngineTest, RoomForEveryIdTrainsAsTheFixedTable) {
  const std::string zeros = " dim: 4 initializer { kind: ZEROS } }";
  std::string rows = GetParam().rows;
  if (const size_t at = rows.find("STOCHASTIC"); at != std::string::npos)
    rows.replace(at, 10, "NEAREST");
  Engine fixed(ParseConfigText(ConfigText(R"(tables { name: "t0" num_rows: 40)" + zeros,
                                          R"(tables { name: "t1" num_rows: 25)" + zeros,
                                          GetParam().optimizers, 2, rows)));
  Engine dynamic(ParseConfigText(ConfigText(
      R"(tables { name: "t0" num_rows: 40 kind: DYNAMIC)" + zeros,
      R"(tables { name: "t1" num_rows: 25 kind: DYNAMIC dynamic { eviction: LFU })" + zeros,
      GetParam().optimizers, 2, rows)));
  EXPECT_EQ(Train(dynamic, 12), Train(fixed, 12));
  const auto a = Params(fixed), b = Params(dynamic);
  for (const auto& [name, values] : a) {
    if (name.rfind("embedding.", 0) == 0)
      EXPECT_EQ(SortedRows(values, 4), SortedRows(b.at(name), 4)) << name;
    else
      EXPECT_EQ(std::memcmp(values.data(), b.at(name).data(), values.size() * sizeof(float)), 0)
          << name;
  }
  const TableStats t0 = dynamic.GetTableStats("t0");
  EXPECT_TRUE(t0.dynamic);
  EXPECT_EQ(t0.capacity, 40);
  EXPECT_GT(t0.size, 20);
  EXPECT_EQ(t0.counts.admitted, t0.size);
  EXPECT_EQ(t0.counts.evicted, 0);
  EXPECT_GT(t0.counts.hits, t0.counts.lookups / 2);
  EXPECT_FALSE(fixed.GetTableStats("t0").dynamic);
}

// Tables too small for their ids: LRU, LFU with admission after 2 occurrences and a
// default row, TTL with probabilistic admission. Every decision, and so every bit of the
// losses and parameters, is the same at 1, 2 and 4 threads.
const char kEvictingT0[] =
    R"(tables { name: "t0" num_rows: 12 dim: 4 kind: DYNAMIC dynamic { eviction: LRU } })";
const char kEvictingT1[] = R"(tables { name: "t1" num_rows: 8 dim: 4 kind: DYNAMIC
    initializer { kind: NORMAL stddev: 0.3 }
    dynamic { eviction: LFU min_count: 2 sketch_width: 64 unadmitted: DEFAULT_ROW } })";
const char kTtlT0[] = R"(tables { name: "t0" num_rows: 12 dim: 4 kind: DYNAMIC
    dynamic { eviction: TTL ttl_steps: 2 admit_probability: 0.5 } })";

TEST_P(DynamicEngineTest, AdmissionsAndEvictionsAreBitwiseTheSameAtAnyThreadCount) {
  for (const char* t0 : {kEvictingT0, kTtlT0}) {
    std::vector<uint32_t> ref_losses;
    std::map<std::string, std::vector<float>> ref_params;
    TableStats ref_t0, ref_t1;
    for (const int threads : {1, 2, 4}) {
      Engine engine(ParseConfigText(ConfigText(t0, kEvictingT1, GetParam(), threads)));
      const auto losses = Train(engine, 12);
      const TableStats s0 = engine.GetTableStats("t0"), s1 = engine.GetTableStats("t1");
      if (threads == 1) {
        ref_losses = losses, ref_params = Params(engine), ref_t0 = s0, ref_t1 = s1;
        EXPECT_GT(s0.counts.evicted, 0) << t0;
        EXPECT_GT(s1.counts.evicted, 0);
        EXPECT_EQ(s1.capacity, 7);  // one of the 8 rows is the default row
        EXPECT_LT(s1.counts.admitted, s1.counts.lookups - s1.counts.hits);  // min_count 2
        continue;
      }
      EXPECT_EQ(losses, ref_losses) << threads << " threads, " << t0;
      EXPECT_TRUE(BitwiseEqual(Params(engine), ref_params)) << threads << " threads, " << t0;
      EXPECT_TRUE(SameStats(s0, ref_t0) && SameStats(s1, ref_t1)) << threads << " threads";
    }
  }
}

TEST_P(DynamicEngineTest, ResumeFromCheckpointContinuesBitwise) {
  const std::string dir = testing::TempDir("dynamic_resume");
  const std::string config = ConfigText(kTtlT0, kEvictingT1, GetParam(), 2);
  Engine straight(ParseConfigText(config));
  Train(straight, 6);
  const auto second = Train(straight, 6, 6);

  auto interrupted = std::make_unique<Engine>(ParseConfigText(config));
  Train(*interrupted, 6);
  interrupted->Save(dir + "/mid.ckpt");
  const TableStats saved = interrupted->GetTableStats("t1");
  interrupted.reset();
  auto resumed = Engine::FromCheckpoint(dir + "/mid.ckpt");
  EXPECT_TRUE(SameStats(resumed->GetTableStats("t1"), saved));
  EXPECT_EQ(Train(*resumed, 6, 6), second);
  EXPECT_TRUE(BitwiseEqual(Params(*resumed), Params(straight)));
  EXPECT_TRUE(SameStats(resumed->GetTableStats("t0"), straight.GetTableStats("t0")));

  // Load into a live engine (a fresh state is swapped in) gives the same.
  Engine loaded(ParseConfigText(config));
  Train(loaded, 3, 100);
  loaded.Load(dir + "/mid.ckpt");
  EXPECT_EQ(Train(loaded, 6, 6), second);
}

// Asynchronous steps resolve their ids when they run, in submission order: bitwise the
// synchronous steps.
TEST_P(DynamicEngineTest, AsynchronousStepsEqualSynchronousOnes) {
  const std::string config = ConfigText(kEvictingT0, kEvictingT1, GetParam(), 2);
  Engine sync(ParseConfigText(config)), async(ParseConfigText(config));
  const auto losses = Train(sync, 8);
  std::vector<OwnedBatch> batches;
  std::vector<int64_t> tickets;
  for (int s = 0; s < 8; ++s) batches.push_back(RawBatch(async, 64, s, s % 2 == 1));
  for (const OwnedBatch& b : batches) tickets.push_back(async.SubmitTrainStep(b.view()));
  std::vector<uint32_t> async_losses;
  for (const int64_t t : tickets) {
    const float loss = async.WaitTrainStep(t);
    uint32_t bits;
    std::memcpy(&bits, &loss, sizeof bits);
    async_losses.push_back(bits);
  }
  EXPECT_EQ(async_losses, losses);
  EXPECT_TRUE(BitwiseEqual(Params(async), Params(sync)));
  EXPECT_TRUE(SameStats(async.GetTableStats("t0"), sync.GetTableStats("t0")));
}

// A step that diverges (bottom MLP weights of 3e38 overflow the forward) throws having
// changed nothing: not the admissions and evictions its ids made, not the rows they
// overwrote. With the weight written back, the engine trains on as one that never saw
// that batch.
TEST_P(DynamicEngineTest, ADivergedStepTakesItsAdmissionsAndEvictionsBack) {
  const std::string config = ConfigText(kTtlT0, kEvictingT1, GetParam(), 2);
  Engine failed(ParseConfigText(config)), control(ParseConfigText(config));
  Train(failed, 5);
  Train(control, 5);
  const std::string weight = "bottom_mlp.0.weight";
  std::vector<float> kept = Params(failed).at(weight), huge(kept.size(), 3e38f);
  failed.WriteParameter(weight, huge.data(), static_cast<int64_t>(huge.size()));
  // New ids, each twice (t1 admits at the second occurrence): admissions and evictions.
  OwnedBatch diverging = RawBatch(failed, 64, 1000, false);
  for (size_t i = 0; i < diverging.ids.size(); ++i)
    diverging.ids[i] = (int64_t{1} << 61) + static_cast<int64_t>(i / 2);
  {
    Engine probe(ParseConfigText(config));
    Train(probe, 5);
    const TableStats before = probe.GetTableStats("t0");
    probe.TrainStep(diverging.view());
    const TableStats after = probe.GetTableStats("t0");
    ASSERT_GT(after.counts.admitted, before.counts.admitted) << "the batch admits";
    ASSERT_GT(after.counts.evicted, before.counts.evicted) << "the batch evicts";
  }
  const auto params = Params(failed);
  const TableStats t0 = failed.GetTableStats("t0"), t1 = failed.GetTableStats("t1");
  try {
    failed.TrainStep(diverging.view());
    ADD_FAILURE() << "a diverging step succeeded";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), StatusCode::kFailedPrecondition) << e.what();
  }
  EXPECT_TRUE(BitwiseEqual(Params(failed), params));
  EXPECT_TRUE(SameStats(failed.GetTableStats("t0"), t0));
  EXPECT_TRUE(SameStats(failed.GetTableStats("t1"), t1));
  EXPECT_EQ(failed.step(), 5);
  failed.WriteParameter(weight, kept.data(), static_cast<int64_t>(kept.size()));
  EXPECT_EQ(Train(failed, 6, 5), Train(control, 6, 5));
  EXPECT_TRUE(BitwiseEqual(Params(failed), Params(control)));
}

// The Engine's side of a device backend's contract (train/backend.h), with a backend that
// computes on a state of its own as the CUDA backend does on the device: each step's
// admissions reach that copy before the step, a diverged step's are taken back there too
// (else the next read, which pulls the copy, would bring the overwritten rows back as
// the fresh ones), and every read pulls the copy first (16-bit tables' rows too): bitwise
// the engine that computes on its host copy.
TEST_P(DynamicEngineTest, ABackendWithAStateOfItsOwnTrainsBitwiseTheSame) {
  const std::string config = ConfigText(kTtlT0, kEvictingT1, GetParam(), 2);
  Engine copying(ParseConfigText(config), testing::CopyingEngineBackend::Factory()),
      control(ParseConfigText(config));
  EXPECT_EQ(Train(copying, 5), Train(control, 5));
  // Each table read before any other read pulled the copy (t0: 12 rows, t1: 8, of 4).
  for (const auto& [table, n] :
       {std::pair{"embedding.t0.weight", 48}, {"embedding.t1.weight", 32}}) {
    std::vector<float> a(n), b(n);
    copying.ReadParameter(table, a.data(), n);
    control.ReadParameter(table, b.data(), n);
    EXPECT_EQ(a, b) << table;
  }
  // Weights of 3e38 overflow the forward of any batch with dense values, not of one whose
  // dense values are 0: after such a step (the host copy stale again, as in training) a
  // step that admits and evicts diverges. The control takes all but that step.
  const std::string weight = "bottom_mlp.0.weight";
  const std::vector<float> kept = Params(control).at(weight), huge(kept.size(), 3e38f);
  OwnedBatch zeros = RawBatch(control, 64, 50, false);
  std::fill(zeros.dense.begin(), zeros.dense.end(), 0.0f);
  for (Engine* e : {&copying, &control}) {
    e->WriteParameter(weight, huge.data(), static_cast<int64_t>(huge.size()));
    e->TrainStep(zeros.view());
  }
  OwnedBatch diverging = RawBatch(copying, 64, 1000, false);
  for (size_t i = 0; i < diverging.ids.size(); ++i)
    diverging.ids[i] = (int64_t{1} << 61) + static_cast<int64_t>(i / 2);
  EXPECT_THROW(copying.TrainStep(diverging.view()), Error);
  for (Engine* e : {&copying, &control})
    e->WriteParameter(weight, kept.data(), static_cast<int64_t>(kept.size()));
  EXPECT_EQ(Train(copying, 6, 5), Train(control, 6, 5));
  EXPECT_TRUE(BitwiseEqual(Params(copying), Params(control)));
  EXPECT_TRUE(SameStats(copying.GetTableStats("t0"), control.GetTableStats("t0")));
  EXPECT_TRUE(SameStats(copying.GetTableStats("t1"), control.GetTableStats("t1")));
  const OwnedBatch probe = RawBatch(control, 32, 77, true);
  std::vector<float> a(32), b(32);
  copying.Predict(probe.view(), a.data(), 32);
  control.Predict(probe.view(), b.data(), 32);
  EXPECT_EQ(std::memcmp(a.data(), b.data(), sizeof(float) * 32), 0);
}

// The FP32 suites with two optimizer sets, and 16-bit rows (issue 16): BF16 rounded
// stochastically (the diverged step's rows come back as their own bits), FP16 to nearest.
constexpr char kAdamAdagrad[] =
    "sparse_optimizer { learning_rate: 0.05 adam {} }\ndense_optimizer { adagrad {} }";
INSTANTIATE_TEST_SUITE_P(Variants, DynamicEngineTest,
                         ::testing::Values(Variant{"Sgd", "", ""},
                                           Variant{"AdamAdagrad", kAdamAdagrad, ""},
                                           Variant{"Bf16Stochastic", kAdamAdagrad,
                                                   "precision: BF16 rounding: STOCHASTIC"},
                                           Variant{"Fp16Nearest", "", "precision: FP16"}),
                         [](const ::testing::TestParamInfo<Variant>& info) {
                           return std::string(info.param.name);
                         });

// BF16 rows in a DYNAMIC table: half the weights' bytes, every stored value a bf16 value
// (its low 16 bits zero once widened), and after admissions, evictions and updates within
// bf16's rounding of what the FP32 table learns from the same batches.
TEST(DynamicEngineTest, Bf16RowsHalveTheWeightsAndTrainCloseToFp32) {
  Engine fp32(ParseConfigText(ConfigText(kEvictingT0, kEvictingT1)));
  Engine bf16(ParseConfigText(
      ConfigText(kEvictingT0, kEvictingT1, "", 1, "precision: BF16 rounding: STOCHASTIC")));
  const std::vector<uint32_t> a = Train(fp32, 8), b = Train(bf16, 8);
  for (int t = 0; t < 2; ++t) {
    const std::string& name = fp32.config().model().tables(t).name();
    const TableStats wide = fp32.GetTableStats(name), narrow = bf16.GetTableStats(name);
    EXPECT_EQ(wide.counts.admitted, narrow.counts.admitted) << name;
    EXPECT_GT(narrow.counts.evicted, 0) << name;
    // Every row's weights (the default row's too), dim 4.
    const int64_t weights = fp32.config().model().tables(t).num_rows() * 4 * 4;
    EXPECT_EQ(wide.memory_bytes - narrow.memory_bytes, weights / 2) << name;
  }
  for (int s = 0; s < 8; ++s) {
    float la, lb;
    std::memcpy(&la, &a[static_cast<size_t>(s)], sizeof la);
    std::memcpy(&lb, &b[static_cast<size_t>(s)], sizeof lb);
    EXPECT_NEAR(lb, la, 0.02 * std::abs(la)) << "step " << s;
  }
  for (const auto& [name, values] : Params(bf16)) {
    if (name.rfind("embedding.", 0) != 0) continue;
    for (size_t i = 0; i < values.size(); ++i) {
      uint32_t bits;
      std::memcpy(&bits, &values[i], sizeof bits);
      ASSERT_EQ(bits & 0xFFFF, 0u) << name << "[" << i << "] is not a bf16 value";
    }
  }
}

// Prediction looks ids up and admits nothing; an id without a row is left out of its bag
// (ZERO), so a bag of unseen ids predicts as an empty bag.
TEST(DynamicEngineTest, PredictionAdmitsNothingAndLeavesUnseenIdsOut) {
  Engine engine(ParseConfigText(ConfigText(kEvictingT0, "")));
  Train(engine, 4);
  const TableStats before = engine.GetTableStats("t0");
  OwnedBatch unseen = RawBatch(engine, 16, 77, false);
  OwnedBatch empty = unseen;
  int64_t at = 0, kept = 0;
  for (int f = 0; f < 3; ++f)
    for (int64_t s = 0; s < 16; ++s) {
      int32_t& len = unseen.lengths[f * 16 + s];
      for (int32_t k = 0; k < len; ++k, ++at) {
        if (f == 1) {
          empty.ids[kept++] = unseen.ids[at];
        } else {
          unseen.ids[at] = int64_t{1} << 62 | (at + 1);  // never trained
        }
      }
      if (f != 1) empty.lengths[f * 16 + s] = 0;
    }
  empty.ids.resize(static_cast<size_t>(kept));
  std::vector<float> p_unseen(16), p_empty(16);
  engine.Predict(unseen.view(), p_unseen.data(), 16);
  engine.Predict(empty.view(), p_empty.data(), 16);
  EXPECT_EQ(p_unseen, p_empty);
  engine.Evaluate({unseen.view()});
  EXPECT_TRUE(SameStats(engine.GetTableStats("t0"), before));
}

// Every int64 is an id of a DYNAMIC table, the extremes included; a FIXED table still
// refuses ids outside its rows.
TEST(DynamicEngineTest, EveryInt64IsAnId) {
  Engine engine(ParseConfigText(ConfigText(kEvictingT0, "")));
  OwnedBatch batch = testing::SmallBatch(8, 3);
  const int64_t extremes[] = {std::numeric_limits<int64_t>::min(),
                              std::numeric_limits<int64_t>::max(), -1, 0};
  const auto f1 = static_cast<size_t>(
      std::accumulate(batch.lengths.begin(), batch.lengths.begin() + 8, int64_t{0}));
  ASSERT_GE(f1, 4u) << "feature 0 has ids";
  for (size_t i = 0; i < f1; ++i) batch.ids[i] = extremes[i % 4];
  const auto f2 = static_cast<size_t>(
      std::accumulate(batch.lengths.begin(), batch.lengths.begin() + 16, int64_t{0}));
  std::set<int64_t> distinct(batch.ids.begin(), batch.ids.begin() + static_cast<ptrdiff_t>(f1));
  distinct.insert(batch.ids.begin() + static_cast<ptrdiff_t>(f2), batch.ids.end());
  EXPECT_NO_THROW(engine.TrainStep(batch.view()));
  EXPECT_EQ(engine.GetTableStats("t0").counts.admitted, static_cast<int64_t>(distinct.size()));
  ASSERT_LT(f1, batch.ids.size()) << "feature 1 (FIXED t1) has ids";
  batch.ids[f1] = 25;
  try {
    engine.TrainStep(batch.view());
    ADD_FAILURE() << "an id outside the FIXED table was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), StatusCode::kOutOfRange);
  }
}

TEST(DynamicEngineTest, StatsOfAnUnknownTableIsNotFound) {
  Engine engine(ParseConfigText(ConfigText(kEvictingT0, "")));
  try {
    engine.GetTableStats("t9");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), StatusCode::kNotFound);
    EXPECT_THAT(e.what(), HasSubstr("t9"));
  }
  const TableStats fixed = engine.GetTableStats("t1");
  EXPECT_EQ(fixed.capacity, 25);
  EXPECT_EQ(fixed.memory_bytes, 25 * 4 * 4);  // SGD keeps no state
}

// Each bad DYNAMIC setting is refused by the Engine naming the field.
TEST(DynamicEngineTest, BadDynamicSettingsAreRefusedNamingTheField) {
  const auto expect_invalid = [](const std::string& t0, const std::string& needle) {
    try {
      Engine engine(ParseConfigText(ConfigText(t0, "")));
      ADD_FAILURE() << needle;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), StatusCode::kInvalidArgument) << e.what();
      EXPECT_THAT(e.what(), HasSubstr(needle));
    }
  };
  const std::string head = R"(tables { name: "t0" dim: 4 )";
  expect_invalid(head + "num_rows: 40 dynamic { min_count: 2 } }",
                 "model.tables[0].dynamic is set but model.tables[0].kind is FIXED");
  expect_invalid(head + "num_rows: 40 kind: DYNAMIC dynamic { eviction: TTL } }",
                 "model.tables[0].dynamic.ttl_steps must be >= 1 for TTL eviction");
  expect_invalid(head + "num_rows: 40 kind: DYNAMIC dynamic { min_count: 0 } }",
                 "model.tables[0].dynamic.min_count must be >= 1");
  expect_invalid(head + "num_rows: 40 kind: DYNAMIC dynamic { min_count: 2 sketch_width: 100 } }",
                 "model.tables[0].dynamic.sketch_width must be a power of two");
  for (const char* p : {"0", "1.5", "nan", "-1"})
    expect_invalid(head + "num_rows: 40 kind: DYNAMIC dynamic { admit_probability: " + p + " } }",
                   "model.tables[0].dynamic.admit_probability must be in (0, 1]");
  expect_invalid(head + "num_rows: 1 kind: DYNAMIC dynamic { unadmitted: DEFAULT_ROW } }",
                 "model.tables[0].num_rows must be >= 2 with dynamic.unadmitted DEFAULT_ROW");
  expect_invalid(head + "num_rows: 1099511627777 kind: DYNAMIC }",
                 "model.tables[0].num_rows of a DYNAMIC table must be at most 2^40");
  expect_invalid(head + "num_rows: 40 kind: DYNAMIC dynamic { ttl_steps: -1 } }",
                 "model.tables[0].dynamic.ttl_steps must be >= 0");
}

// The dynamic state of a checkpoint whose per-id tensors were damaged (a row held by two
// ids) is DATA_LOSS naming the table, and the engine it was loaded into is unchanged.
TEST(DynamicEngineTest, DamagedDynamicStateIsDataLossAndChangesNothing) {
  const std::string dir = testing::TempDir("dynamic_damaged");
  Engine engine(ParseConfigText(ConfigText(kEvictingT0, "")));
  Train(engine, 5);
  engine.Save(dir + "/good.ckpt");

  const CheckpointReader good(dir + "/good.ckpt");
  CheckpointWriter bad;
  for (const auto& [key, value] : good.metadata()) bad.SetMetadata(key, value);
  std::map<std::string, std::vector<char>> data;
  for (const std::string& name : good.TensorNames()) {
    const std::vector<int64_t> shape = good.TensorShape(name);
    int64_t count = 1;
    for (const int64_t d : shape) count *= d;
    const bool dynamic = name.rfind("dynamic.", 0) == 0;
    const auto dtype = !dynamic ? checkpoint::TensorEntry::FLOAT32
                       : name.find(".sketch") != std::string::npos ? checkpoint::TensorEntry::UINT32
                                                                   : checkpoint::TensorEntry::INT64;
    const size_t bytes =
        static_cast<size_t>(count) * (dtype == checkpoint::TensorEntry::INT64 ? 8 : 4);
    std::vector<char>& buffer = data[name];
    buffer.resize(bytes);
    good.ReadTensor(name, dtype, shape, buffer.data());
    if (name == "dynamic.t0.rows") {
      ASSERT_GE(count, 2);
      std::memcpy(buffer.data() + 8, buffer.data(), 8);  // two ids in one row
    }
    bad.AddTensor(name, dtype, shape, buffer.data(), bytes);
  }
  bad.WriteAtomic(dir + "/bad.ckpt");

  Train(engine, 2, 50);
  const auto params = Params(engine);
  const TableStats stats = engine.GetTableStats("t0");
  for (const bool fresh : {false, true}) {
    try {
      if (fresh)
        Engine::FromCheckpoint(dir + "/bad.ckpt");
      else
        engine.Load(dir + "/bad.ckpt");
      ADD_FAILURE() << "a damaged dynamic state was loaded";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), StatusCode::kDataLoss) << e.what();
      EXPECT_THAT(e.what(), HasSubstr("dynamic table \"t0\""));
    }
  }
  EXPECT_TRUE(BitwiseEqual(Params(engine), params));
  EXPECT_TRUE(SameStats(engine.GetTableStats("t0"), stats));
}

}  // namespace
}  // namespace dlrm

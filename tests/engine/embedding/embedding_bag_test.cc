#include "engine/embedding/embedding_bag.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "engine/core/philox.h"
#include "engine/core/status.h"
#include "engine/core/thread_pool.h"

namespace dlrm {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;

// A validated batch over storage it owns (no dense features). Not copyable: the
// validated view points into the owned vectors.
class TestBatch {
 public:
  TestBatch(int64_t batch_size, std::vector<int32_t> lengths, std::vector<int64_t> ids,
            std::vector<float> weights, const std::vector<SparseFeatureSpec>& specs) {
    owned_.batch_size = batch_size;
    owned_.num_sparse = static_cast<int32_t>(specs.size());
    owned_.lengths = std::move(lengths);
    owned_.ids = std::move(ids);
    owned_.weights = std::move(weights);
    validated_ = ValidateBatch(owned_.view(), 0, specs, /*require_labels=*/false);
  }
  TestBatch(const TestBatch&) = delete;
  TestBatch& operator=(const TestBatch&) = delete;

  const ValidatedBatch& get() const { return validated_; }
  const OwnedBatch& owned() const { return owned_; }

 private:
  OwnedBatch owned_;
  ValidatedBatch validated_;
};

template <typename T>
std::vector<SparseFeatureSpec> SpecsFor(const std::vector<EmbeddingTable<T>>& tables,
                                        const std::vector<FeatureBinding>& features) {
  std::vector<SparseFeatureSpec> specs;
  for (const FeatureBinding& f : features) specs.push_back({f.table, tables[f.table].num_rows()});
  return specs;
}

// ---- forward: hand-computed values ---------------------------------------------------

// Table A: 5 rows x dim 2, row r = (r + 1, 10 (r + 1)).
// Table B: 3 rows x dim 3, row r = (100 r, 100 r + 1, 100 r + 2).
std::vector<EmbeddingTable<double>> HandTables() {
  std::vector<EmbeddingTable<double>> tables;
  tables.emplace_back("A", 5, 2);
  tables.emplace_back("B", 3, 3);
  for (int r = 0; r < 5; ++r) {
    tables[0].row(r)[0] = r + 1;
    tables[0].row(r)[1] = 10 * (r + 1);
  }
  for (int r = 0; r < 3; ++r)
    for (int k = 0; k < 3; ++k) tables[1].row(r)[k] = 100 * r + k;
  return tables;
}

// Forward over [b0, b1) into a buffer pre-filled with NaN, so unwritten cells show.
std::vector<double> RunForward(const EmbeddingBagCollection<double>& bags, const TestBatch& batch,
                               int64_t b0, int64_t b1) {
  std::vector<double> pooled((b1 - b0) * bags.pooled_width(),
                             std::numeric_limits<double>::quiet_NaN());
  bags.Forward(batch.get(), b0, b1, pooled.data());
  return pooled;
}

TEST(EmbeddingBagForward, SumPooling) {
  auto tables = HandTables();
  std::vector<FeatureBinding> features = {{0, 0, false}};
  EmbeddingBagCollection<double> bags(&tables, features, 2);
  EXPECT_EQ(bags.pooled_width(), 2);
  EXPECT_EQ(bags.num_features(), 1);
  // Bags: {1, 3}, {0}, {}, {4, 4}.
  TestBatch batch(4, {2, 1, 0, 2}, {1, 3, 0, 4, 4}, {}, SpecsFor(tables, features));
  EXPECT_THAT(RunForward(bags, batch, 0, 4), ElementsAre(6, 60, 1, 10, 0, 0, 10, 100));
}

TEST(EmbeddingBagForward, MeanPoolingAndEmptyBag) {
  auto tables = HandTables();
  std::vector<FeatureBinding> features = {{0, 0, true}};
  EmbeddingBagCollection<double> bags(&tables, features, 2);
  // Bags: {1, 3}, {}, {0, 1, 4}.
  TestBatch batch(3, {2, 0, 3}, {1, 3, 0, 1, 4}, {}, SpecsFor(tables, features));
  EXPECT_THAT(RunForward(bags, batch, 0, 3), ElementsAre(3, 30, 0, 0, 8.0 / 3, 80.0 / 3));
}

TEST(EmbeddingBagForward, PerIdWeights) {
  auto tables = HandTables();
  std::vector<FeatureBinding> features = {{0, 0, false}, {0, 2, true}};
  EmbeddingBagCollection<double> bags(&tables, features, 4);
  // Feature 0 (SUM): {1 x 0.5, 3 x 2}, {2 x -1}. Feature 1 (MEAN): {0 x 3, 0 x 1}, {}.
  TestBatch batch(2, {2, 1, 2, 0}, {1, 3, 2, 0, 0}, {0.5f, 2.0f, -1.0f, 3.0f, 1.0f},
                  SpecsFor(tables, features));
  EXPECT_THAT(RunForward(bags, batch, 0, 2),
              ElementsAre(0.5 * 2 + 2 * 4, 0.5 * 20 + 2 * 40, 2, 20,  // sample 0
                          -3, -30, 0, 0));                            // sample 1
}

// Two features share table A; a feature on B (dim 3) sits between them.
std::vector<FeatureBinding> SharedAndMixedDims() {
  return {{0, 0, false}, {1, 2, true}, {0, 5, false}};
}

TEST(EmbeddingBagForward, SharedTableAndDifferentDims) {
  auto tables = HandTables();
  const auto features = SharedAndMixedDims();
  EmbeddingBagCollection<double> bags(&tables, features, 7);
  // f0: {0}, {1, 2}   f1: {2, 1}, {}   f2: {4}, {0, 0, 0}
  TestBatch batch(2, {1, 2, 2, 0, 1, 3}, {0, 1, 2, 2, 1, 4, 0, 0, 0}, {},
                  SpecsFor(tables, features));
  EXPECT_THAT(RunForward(bags, batch, 0, 2), ElementsAre(1, 10, 150, 151, 152, 5, 50,  // sample 0
                                                         5, 50, 0, 0, 0, 3, 30));      // sample 1
}

TEST(EmbeddingBagForward, SubRangeMatchesFullBatchRows) {
  auto tables = HandTables();
  const auto features = SharedAndMixedDims();
  EmbeddingBagCollection<double> bags(&tables, features, 7);
  TestBatch batch(
      4, {1, 2, 0, 3, 2, 0, 1, 1, 1, 3, 2, 0}, {0, 1, 2, 4, 4, 3, 2, 1, 0, 1, 4, 0, 0, 0, 2, 3},
      {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}, SpecsFor(tables, features));
  const auto full = RunForward(bags, batch, 0, 4);
  const auto middle = RunForward(bags, batch, 1, 3);
  EXPECT_THAT(middle, ElementsAreArray(full.begin() + 7, full.begin() + 21));
  const auto last = RunForward(bags, batch, 3, 4);
  EXPECT_THAT(last, ElementsAreArray(full.begin() + 21, full.end()));
  // By hand (weight of position i is i + 1):
  // sample 1: f0 {1 x 2, 2 x 3} = (13, 130); f1 {} = 0; f2 {0 x 12, 0 x 13, 0 x 14} = (39, 390)
  // sample 2: f0 {} = 0; f1 mean {0 x 9} = (0, 9, 18); f2 {2 x 15, 3 x 16} = (109, 1090)
  EXPECT_THAT(middle, ElementsAre(13, 130, 0, 0, 0, 39, 390,  //
                                  0, 0, 0, 9, 18, 109, 1090));
  EXPECT_TRUE(RunForward(bags, batch, 2, 2).empty());
}

TEST(EmbeddingBagForward, ColumnsNoFeatureCoversAreZero) {
  // Features need not tile the pooled row: the rest of it is zeroed, never left as it was.
  auto tables = HandTables();
  const std::vector<FeatureBinding> features = {{1, 4, false}, {0, 0, false}};
  EmbeddingBagCollection<double> bags(&tables, features, 9);
  // f0 (B): {1}, {}   f1 (A): {0, 2}, {3}
  TestBatch batch(2, {1, 0, 2, 1}, {1, 0, 2, 3}, {}, SpecsFor(tables, features));
  EXPECT_THAT(RunForward(bags, batch, 0, 2),
              ElementsAre(4, 40, 0, 0, 100, 101, 102, 0, 0,  // sample 0
                          4, 40, 0, 0, 0, 0, 0, 0, 0));      // sample 1
}

// In float, dims that are multiples of 8 take the AVX2 kernel where the CPU has it
// (pool_bag_avx2.h); it must give the portable loop's bits: rows added one by one from
// zero, a weighted row multiplied then added, a MEAN bag divided at the end. Dims 4 and 12
// stay portable; 72 and 136 cover a partial second 64-column block.
TEST(EmbeddingBagForward, FloatMatchesThePortableSumsBitwise) {
  const std::vector<int32_t> dims = {4, 8, 12, 24, 64, 72, 136};
  std::vector<EmbeddingTable<float>> tables;
  std::mt19937 gen(7);
  std::uniform_real_distribution<float> value(-1.0f, 1.0f);
  for (size_t t = 0; t < dims.size(); ++t) {
    tables.emplace_back("t" + std::to_string(t), 50, dims[t]);
    for (int64_t r = 0; r < 50; ++r)
      for (int32_t k = 0; k < dims[t]; ++k) tables[t].row(r)[k] = value(gen);
  }
  std::vector<FeatureBinding> features;
  int32_t width = 0;
  for (size_t t = 0; t < dims.size(); ++t) {
    for (bool mean : {false, true}) {
      features.push_back({static_cast<int32_t>(t), width, mean});
      width += dims[t];
    }
  }
  const int64_t batch_size = 9;
  std::vector<int32_t> lengths;
  std::vector<int64_t> ids;
  std::uniform_int_distribution<int32_t> length(0, 13);
  std::uniform_int_distribution<int64_t> id(0, 49);
  for (size_t f = 0; f < features.size(); ++f) {
    for (int64_t b = 0; b < batch_size; ++b) {
      lengths.push_back(length(gen));
      for (int32_t i = 0; i < lengths.back(); ++i) ids.push_back(id(gen));
    }
  }
  std::vector<float> weights(ids.size());
  for (float& w : weights) w = value(gen);
  const std::vector<SparseFeatureSpec> specs = SpecsFor(tables, features);
  EmbeddingBagCollection<float> bags(&tables, features, width);

  for (bool weighted : {false, true}) {
    TestBatch batch(batch_size, lengths, ids, weighted ? weights : std::vector<float>{}, specs);
    std::vector<float> pooled(batch_size * width, std::numeric_limits<float>::quiet_NaN());
    bags.Forward(batch.get(), 0, batch_size, pooled.data());
    std::vector<float> expected(batch_size * width, 0.0f);
    for (size_t f = 0; f < features.size(); ++f) {
      const EmbeddingTable<float>& table = tables[features[f].table];
      for (int64_t b = 0; b < batch_size; ++b) {
        float* out = expected.data() + b * width + features[f].offset;
        const int64_t begin = batch.get().bag_begin(f, b), end = batch.get().bag_end(f, b);
        for (int64_t i = begin; i < end; ++i) {
          const float w = weighted ? weights[i] : 1.0f;
          for (int32_t k = 0; k < table.dim(); ++k) {
            const float term = weighted ? w * table.row(ids[i])[k] : table.row(ids[i])[k];
            out[k] += term;
          }
        }
        if (features[f].mean && end > begin)
          for (int32_t k = 0; k < table.dim(); ++k) out[k] /= static_cast<float>(end - begin);
      }
    }
    EXPECT_EQ(std::memcmp(pooled.data(), expected.data(), pooled.size() * sizeof(float)), 0)
        << (weighted ? "weighted" : "unweighted") << " bags differ from the portable sums";
  }
}

TEST(EmbeddingBagConstruction, RejectsBadBindings) {
  auto tables = HandTables();
  EXPECT_THROW(EmbeddingBagCollection<double>(&tables, {{2, 0, false}}, 2), Error);
  EXPECT_THROW(EmbeddingBagCollection<double>(&tables, {{1, 0, false}}, 2), Error);
  EXPECT_THROW(EmbeddingBagCollection<double>(&tables, {{0, -1, false}}, 2), Error);
  EXPECT_THROW(EmbeddingBagCollection<double>(nullptr, {}, 0), Error);
}

// ---- backward: an optimizer that records what it is given ---------------------------

// Records every UpdateRow call and leaves the weights alone.
template <typename T>
class RecordingOptimizer : public SparseOptimizer<T> {
 public:
  struct Call {
    std::vector<T> grad;
    const T* weights;
    float lr;
    int64_t step;
    int count;
  };

  void UpdateRow(int32_t table, int64_t row, T* weights, const T* grad, int32_t dim, float lr,
                 int64_t step) override {
    std::lock_guard<std::mutex> lock(mu_);
    Call& call = calls_[{table, row}];
    call.grad.assign(grad, grad + dim);
    call.weights = weights;
    call.lr = lr;
    call.step = step;
    ++call.count;
  }
  bool RowUpdateIsFinite(int32_t, int64_t, const T*, const T*, int32_t, float,
                         int64_t) const override {
    return true;  // writes nothing either way
  }
  std::vector<std::pair<std::string, std::vector<T>*>> StateBuffers(int32_t) override { return {}; }
  bool HasRowState() const override { return true; }  // so that the backward prefetches
  void PrefetchState(int32_t table, int64_t row) const override {
    std::lock_guard<std::mutex> lock(mu_);
    prefetched_.insert({table, row});
  }
  void ResetRow(int32_t, int64_t) override { ADD_FAILURE() << "no row is reset in this test"; }

  const std::map<std::pair<int32_t, int64_t>, Call>& calls() const { return calls_; }
  const std::set<std::pair<int32_t, int64_t>>& prefetched() const { return prefetched_; }

 private:
  mutable std::mutex mu_;
  std::map<std::pair<int32_t, int64_t>, Call> calls_;
  mutable std::set<std::pair<int32_t, int64_t>> prefetched_;
};

double Loss(const EmbeddingBagCollection<double>& bags, const TestBatch& batch,
            const std::vector<double>& r) {
  const int64_t B = batch.get().view.batch_size;
  std::vector<double> pooled(B * bags.pooled_width());
  bags.Forward(batch.get(), 0, B, pooled.data());
  double loss = 0;
  for (size_t i = 0; i < pooled.size(); ++i) loss += pooled[i] * r[i];
  return loss;
}

std::vector<double> RandomVector(size_t n, uint64_t index) {
  const CounterRng rng(99, 5, index);
  std::vector<double> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = 2 * rng.Uniform(i) - 1;
  return v;
}

// L = sum(pooled * R) is linear in the tables, so central differences are exact up to
// rounding and dL/dpooled = R.
void CheckGradient(bool weighted) {
  std::vector<EmbeddingTable<double>> tables;
  tables.emplace_back("A", 6, 3);
  tables.emplace_back("B", 4, 2);
  config::Initializer init;
  init.set_kind(config::Initializer::UNIFORM);
  init.set_low(-1);
  init.set_high(1);
  for (int t = 0; t < 2; ++t) tables[t].Initialize(init, 17, t);
  // f0: A SUM, f1: B MEAN, f2: A MEAN (shares A with f0), f3: B SUM.
  const std::vector<FeatureBinding> features = {
      {0, 0, false}, {1, 3, true}, {0, 5, true}, {1, 8, false}};
  EmbeddingBagCollection<double> bags(&tables, features, 10);
  // Empty bags, repeated ids in one bag, ids repeated across features and samples;
  // rows A5 and B2 are never touched.
  const std::vector<int32_t> lengths = {3, 0, 2,    // f0
                                        2, 3, 0,    // f1
                                        0, 4, 1,    // f2
                                        1, 0, 2};   // f3
  const std::vector<int64_t> ids = {1, 1, 4, 0, 3,  //
                                    0, 3, 1, 1, 1,  //
                                    2, 1, 2, 0, 4,  //
                                    3, 0, 0};
  std::vector<float> weights;
  if (weighted)
    weights = {0.5f, -2,    1.5f,  3, 0.25f, 1,     -1,    2,    0.5f,
               4,    1.25f, -0.5f, 2, 3,     0.75f, -1.5f, 2.5f, 0.125f};
  TestBatch batch(3, lengths, ids, weights, SpecsFor(tables, features));

  const auto r = RandomVector(3 * 10, weighted ? 1 : 0);
  RecordingOptimizer<double> recorder;
  bags.BackwardAndUpdate(batch.get(), r.data(), recorder, 0.125f, 7, nullptr);

  const std::map<std::pair<int32_t, int64_t>, int> expected_touched = {
      {{0, 0}, 1}, {{0, 1}, 1}, {{0, 2}, 1}, {{0, 3}, 1},
      {{0, 4}, 1}, {{1, 0}, 1}, {{1, 1}, 1}, {{1, 3}, 1}};
  std::map<std::pair<int32_t, int64_t>, int> touched;
  for (const auto& [key, call] : recorder.calls()) {
    touched[key] = call.count;
    EXPECT_EQ(call.weights, tables[key.first].row(key.second));
    EXPECT_EQ(call.lr, 0.125f);
    EXPECT_EQ(call.step, 7);
  }
  EXPECT_EQ(touched, expected_touched);

  const double h = 1e-3;
  for (int32_t t = 0; t < 2; ++t) {
    for (int64_t row = 0; row < tables[t].num_rows(); ++row) {
      const auto it = recorder.calls().find({t, row});
      for (int32_t k = 0; k < tables[t].dim(); ++k) {
        double& x = tables[t].row(row)[k];
        const double saved = x;
        x = saved + h;
        const double up = Loss(bags, batch, r);
        x = saved - h;
        const double down = Loss(bags, batch, r);
        x = saved;
        const double numeric = (up - down) / (2 * h);
        const double analytic = it == recorder.calls().end() ? 0.0 : it->second.grad[k];
        EXPECT_NEAR(analytic, numeric, 1e-9) << "table " << t << " row " << row << " k " << k;
      }
    }
  }
}

TEST(EmbeddingBagBackward, GradientMatchesFiniteDifferencesUnweighted) { CheckGradient(false); }
TEST(EmbeddingBagBackward, GradientMatchesFiniteDifferencesWeighted) { CheckGradient(true); }

TEST(EmbeddingBagBackward, EmptyBatchTouchesNothing) {
  auto tables = HandTables();
  const auto features = SharedAndMixedDims();
  EmbeddingBagCollection<double> bags(&tables, features, 7);
  TestBatch batch(2, {0, 0, 0, 0, 0, 0}, {}, {}, SpecsFor(tables, features));
  std::vector<double> d(2 * 7, 1.0);
  RecordingOptimizer<double> recorder;
  bags.BackwardAndUpdate(batch.get(), d.data(), recorder, 0.1f, 1, nullptr);
  EXPECT_TRUE(recorder.calls().empty());
}

// ---- power-law batches: ordering contract and thread-count determinism --------------

struct PowerLawSetup {
  std::vector<FeatureBinding> features;
  std::vector<TableShape> shapes;
  int32_t pooled_width = 0;
  std::unique_ptr<TestBatch> batch;
};

// Three tables, five features (two pairs share a table), SUM and MEAN, weights, bags of
// 0..24 ids drawn as floor(rows * u^4): a few hot ids repeat hundreds of times.
PowerLawSetup MakePowerLaw(int64_t batch_size) {
  PowerLawSetup s;
  s.shapes = {{1000, 8}, {50, 16}, {100000, 4}};
  const std::vector<std::pair<int32_t, bool>> table_and_mean = {
      {0, false}, {1, true}, {0, true}, {2, false}, {1, false}};
  for (const auto& [table, mean] : table_and_mean) {
    s.features.push_back({table, s.pooled_width, mean});
    s.pooled_width += s.shapes[table].dim;
  }
  const CounterRng rng(2024, 11, 0);
  uint64_t draw = 0;
  std::vector<int32_t> lengths;
  std::vector<int64_t> ids;
  std::vector<float> weights;
  std::vector<SparseFeatureSpec> specs;
  for (const FeatureBinding& f : s.features) {
    const int64_t rows = s.shapes[f.table].num_rows;
    specs.push_back({f.table, rows});
    for (int64_t b = 0; b < batch_size; ++b) {
      const auto len = static_cast<int32_t>(rng.Uniform(draw++) * 25);
      lengths.push_back(len);
      for (int32_t i = 0; i < len; ++i) {
        const double u = rng.Uniform(draw++);
        ids.push_back(std::min<int64_t>(rows - 1, static_cast<int64_t>(rows * std::pow(u, 4))));
        weights.push_back(static_cast<float>(rng.Uniform(draw++) * 2 - 0.5));
      }
    }
  }
  s.batch = std::make_unique<TestBatch>(batch_size, lengths, ids, weights, specs);
  return s;
}

template <typename T>
std::vector<EmbeddingTable<T>> MakeTables(const std::vector<TableShape>& shapes) {
  std::vector<EmbeddingTable<T>> tables;
  config::Initializer init;
  init.set_kind(config::Initializer::NORMAL);
  init.set_stddev(0.1f);
  for (size_t t = 0; t < shapes.size(); ++t) {
    tables.emplace_back("t" + std::to_string(t), shapes[t].num_rows, shapes[t].dim);
    tables.back().Initialize(init, 5, static_cast<int32_t>(t));
  }
  return tables;
}

std::vector<float> DPooled(int64_t n, int64_t step) {
  const CounterRng rng(3, 7, static_cast<uint64_t>(step));
  std::vector<float> d(n);
  for (int64_t i = 0; i < n; ++i) d[i] = static_cast<float>(rng.Normal(i));
  return d;
}

// The gradient of each row must be summed in (id, position) order: rebuild it naively
// with std::sort on pairs and compare bit for bit (float rounding exposes any other order).
TEST(EmbeddingBagBackward, SumsEachRowInIdPositionOrder) {
  const PowerLawSetup s = MakePowerLaw(64);
  auto tables = MakeTables<float>(s.shapes);
  EmbeddingBagCollection<float> bags(&tables, s.features, s.pooled_width);
  const ValidatedBatch& batch = s.batch->get();
  const int64_t B = batch.view.batch_size;
  const auto d = DPooled(B * s.pooled_width, 1);
  ThreadPool pool(3);
  RecordingOptimizer<float> recorder;
  bags.BackwardAndUpdate(batch, d.data(), recorder, 0.1f, 1, &pool);

  for (int32_t t = 0; t < 3; ++t) {
    const int32_t dim = s.shapes[t].dim;
    std::vector<std::pair<int64_t, int64_t>> pairs;  // (id, position)
    for (int32_t f = 0; f < 5; ++f) {
      if (s.features[f].table != t) continue;
      for (int64_t i = batch.bag_begin(f, 0); i < batch.bag_begin(f + 1, 0); ++i)
        pairs.push_back({batch.view.ids[i], i});
    }
    std::sort(pairs.begin(), pairs.end());
    size_t rows_seen = 0;
    for (size_t j = 0; j < pairs.size();) {
      const int64_t id = pairs[j].first;
      std::vector<float> grad(dim, 0.0f);
      for (; j < pairs.size() && pairs[j].first == id; ++j) {
        const int64_t pos = pairs[j].second;
        // Find the (feature, sample) of this position.
        int32_t f = 0;
        while (batch.bag_begin(f + 1, 0) <= pos) ++f;
        int64_t b = 0;
        while (batch.bag_end(f, b) <= pos) ++b;
        const FeatureBinding& fb = s.features[f];
        const float scale =
            fb.mean ? 1.0f / static_cast<float>(batch.bag_end(f, b) - batch.bag_begin(f, b)) : 1.0f;
        const float coef = batch.view.weights[pos] * scale;
        for (int32_t k = 0; k < dim; ++k) grad[k] += coef * d[b * s.pooled_width + fb.offset + k];
      }
      const auto it = recorder.calls().find({t, id});
      ASSERT_NE(it, recorder.calls().end()) << "table " << t << " id " << id;
      EXPECT_EQ(it->second.count, 1);
      ASSERT_EQ(std::memcmp(it->second.grad.data(), grad.data(), dim * sizeof(float)), 0)
          << "table " << t << " id " << id;
      ++rows_seen;
    }
    size_t recorded = 0;
    for (const auto& entry : recorder.calls()) recorded += entry.first.first == t;
    EXPECT_EQ(recorded, rows_seen) << "table " << t;
  }
  // State is prefetched only for rows that are then updated (a hint for a row outside the
  // step would name another row's state), and the backward does prefetch.
  EXPECT_FALSE(recorder.prefetched().empty());
  for (const auto& key : recorder.prefetched())
    EXPECT_EQ(recorder.calls().count(key), 1u) << "table " << key.first << " row " << key.second;
}

struct TrainedState {
  std::vector<std::vector<float>> tables;
  std::vector<std::vector<float>> state;
};

// Three steps of BackwardAndUpdate with the given optimizer and pool (with `checked`,
// UpdateIsFinite then ApplyUpdate instead), at learning rate `lr`.
TrainedState Train(const PowerLawSetup& s, const std::vector<EmbeddingTable<float>>& initial,
                   const config::SparseOptimizerConfig& config, ThreadPool* pool,
                   bool checked = false) {
  auto tables = initial;
  auto optimizer = MakeSparseOptimizer<float>(config, s.shapes);
  EmbeddingBagCollection<float> bags(&tables, s.features, s.pooled_width);
  const int64_t B = s.batch->get().view.batch_size;
  for (int64_t step = 1; step <= 3; ++step) {
    const auto d = DPooled(B * s.pooled_width, step);
    if (!checked) {
      bags.BackwardAndUpdate(s.batch->get(), d.data(), *optimizer, 0.05f, step, pool);
      continue;
    }
    EXPECT_TRUE(bags.UpdateIsFinite(s.batch->get(), d.data(), *optimizer, 0.05f, step, pool));
    bags.ApplyUpdate(d.data(), *optimizer, 0.05f, step, pool);
  }
  TrainedState out;
  for (int32_t t = 0; t < static_cast<int32_t>(tables.size()); ++t) {
    out.tables.push_back(tables[t].data());
    for (const auto& [name, buffer] : optimizer->StateBuffers(t)) out.state.push_back(*buffer);
  }
  return out;
}

bool BitwiseEqual(const std::vector<std::vector<float>>& a,
                  const std::vector<std::vector<float>>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].size() != b[i].size()) return false;
    if (std::memcmp(a[i].data(), b[i].data(), a[i].size() * sizeof(float)) != 0) return false;
  }
  return true;
}

std::vector<config::SparseOptimizerConfig> AllOptimizers() {
  std::vector<config::SparseOptimizerConfig> configs(5);
  configs[1].mutable_sgd();
  configs[2].mutable_adagrad()->set_initial_accumulator(0.1f);
  configs[3].mutable_rowwise_adagrad()->set_eps(1e-6f);
  configs[4].mutable_adam();
  return configs;
}

TEST(EmbeddingBagBackward, BitwiseIdenticalAcrossThreadCounts) {
  const PowerLawSetup s = MakePowerLaw(256);
  const auto initial = MakeTables<float>(s.shapes);
  for (const auto& config : AllOptimizers()) {
    SCOPED_TRACE(config.ShortDebugString());
    const TrainedState reference = Train(s, initial, config, nullptr);
    // Training did change the tables.
    EXPECT_NE(reference.tables[0], initial[0].data());
    for (int threads : {1, 2, 4}) {
      ThreadPool pool(threads);
      const TrainedState got = Train(s, initial, config, &pool);
      EXPECT_TRUE(BitwiseEqual(got.tables, reference.tables)) << threads << " threads";
      EXPECT_TRUE(BitwiseEqual(got.state, reference.state)) << threads << " threads";
    }
  }
}

// The checked halves give BackwardAndUpdate's bits; a check that fails writes nothing.
TEST(EmbeddingBagBackward, CheckedUpdatesEqualUncheckedAndARefusedCheckWritesNothing) {
  const PowerLawSetup s = MakePowerLaw(128);
  const auto initial = MakeTables<float>(s.shapes);
  ThreadPool pool(3);
  for (const auto& config : AllOptimizers()) {
    SCOPED_TRACE(config.ShortDebugString());
    const TrainedState plain = Train(s, initial, config, &pool);
    const TrainedState checked = Train(s, initial, config, &pool, /*checked=*/true);
    EXPECT_TRUE(BitwiseEqual(checked.tables, plain.tables));
    EXPECT_TRUE(BitwiseEqual(checked.state, plain.state));

    auto tables = initial;
    auto optimizer = MakeSparseOptimizer<float>(config, s.shapes);
    EmbeddingBagCollection<float> bags(&tables, s.features, s.pooled_width);
    const auto d = DPooled(s.batch->get().view.batch_size * s.pooled_width, 1);
    EXPECT_FALSE(bags.UpdateIsFinite(s.batch->get(), d.data(), *optimizer,
                                     std::numeric_limits<float>::max(), 1, &pool));
    const auto fresh = MakeSparseOptimizer<float>(config, s.shapes);
    for (int32_t t = 0; t < 3; ++t) {
      EXPECT_EQ(tables[t].data(), initial[t].data());
      const auto now = optimizer->StateBuffers(t), was = fresh->StateBuffers(t);
      ASSERT_EQ(now.size(), was.size());
      for (size_t i = 0; i < now.size(); ++i)
        EXPECT_EQ(*now[i].second, *was[i].second) << now[i].first;
    }
  }
}

TEST(EmbeddingBagBackward, UntouchedRowsAndStateStayBitwiseUnchanged) {
  const PowerLawSetup s = MakePowerLaw(32);
  const ValidatedBatch& batch = s.batch->get();
  std::vector<std::vector<bool>> touched;
  for (const TableShape& shape : s.shapes) touched.emplace_back(shape.num_rows, false);
  for (int32_t f = 0; f < 5; ++f)
    for (int64_t i = batch.bag_begin(f, 0); i < batch.bag_begin(f + 1, 0); ++i)
      touched[s.features[f].table][batch.view.ids[i]] = true;

  const auto initial = MakeTables<float>(s.shapes);
  for (const auto& config : AllOptimizers()) {
    SCOPED_TRACE(config.ShortDebugString());
    auto tables = initial;
    auto optimizer = MakeSparseOptimizer<float>(config, s.shapes);
    std::vector<std::vector<float>> state_before;
    for (int32_t t = 0; t < 3; ++t)
      for (const auto& [name, buffer] : optimizer->StateBuffers(t)) state_before.push_back(*buffer);
    EmbeddingBagCollection<float> bags(&tables, s.features, s.pooled_width);
    ThreadPool pool(2);
    const auto d = DPooled(batch.view.batch_size * s.pooled_width, 1);
    bags.BackwardAndUpdate(batch, d.data(), *optimizer, 0.05f, 1, &pool);

    size_t buffer_index = 0;
    for (int32_t t = 0; t < 3; ++t) {
      const int32_t dim = s.shapes[t].dim;
      for (int64_t row = 0; row < s.shapes[t].num_rows; ++row) {
        if (touched[t][row]) continue;
        ASSERT_EQ(std::memcmp(tables[t].row(row), initial[t].row(row), dim * sizeof(float)), 0)
            << "table " << t << " row " << row;
      }
      for (const auto& [name, buffer] : optimizer->StateBuffers(t)) {
        const std::vector<float>& before = state_before[buffer_index++];
        const int64_t width = static_cast<int64_t>(buffer->size()) / s.shapes[t].num_rows;
        for (int64_t row = 0; row < s.shapes[t].num_rows; ++row) {
          if (touched[t][row]) continue;
          ASSERT_EQ(std::memcmp(buffer->data() + row * width, before.data() + row * width,
                                width * sizeof(float)),
                    0)
              << name << " table " << t << " row " << row;
        }
      }
    }
  }
}

}  // namespace
}  // namespace dlrm

#include "engine/embedding/sparse_optimizer.h"

#include <gmock/gmock.h>
#include <google/protobuf/text_format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "engine/core/status.h"

namespace dlrm {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Two tables: 3 rows x dim 2 and 2 rows x dim 1. The tests update row 1 of table 0 and
// check that everything else keeps its initial state.
const std::vector<TableShape> kShapes = {{3, 2}, {2, 1}};

template <typename T>
class SparseOptimizerTest : public ::testing::Test {
 protected:
  // The hand-computed values are exact in double; float only rounds.
  static constexpr double kTol = sizeof(T) == sizeof(float) ? 2e-6 : 1e-14;

  std::unique_ptr<SparseOptimizer<T>> Make(const config::SparseOptimizerConfig& config) {
    return MakeSparseOptimizer<T>(config, kShapes);
  }

  // Buffer `name` of `table`, failing the test when it is missing.
  static const std::vector<T>& State(SparseOptimizer<T>& opt, int32_t table,
                                     const std::string& name) {
    for (const auto& [n, buffer] : opt.StateBuffers(table))
      if (n == name) return *buffer;
    ADD_FAILURE() << "no state buffer " << name;
    static const std::vector<T> kEmpty;
    return kEmpty;
  }

  void ExpectNear(const std::vector<T>& got, const std::vector<double>& want) {
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], kTol) << "index " << i;
  }
};
using Types = ::testing::Types<float, double>;
TYPED_TEST_SUITE(SparseOptimizerTest, Types);

TYPED_TEST(SparseOptimizerTest, SgdTwoSteps) {
  config::SparseOptimizerConfig config;
  config.mutable_sgd();
  auto opt = this->Make(config);
  std::vector<TypeParam> w = {1, -2};
  const std::vector<TypeParam> g1 = {0.5, 1}, g2 = {-1, 2};
  opt->UpdateRow(0, 1, w.data(), g1.data(), 2, 0.5f, 1);
  this->ExpectNear(w, {0.75, -2.5});  // w - 0.5 g1
  opt->UpdateRow(0, 1, w.data(), g2.data(), 2, 0.25f, 2);
  this->ExpectNear(w, {1.0, -3.0});  // w - 0.25 g2
  EXPECT_TRUE(opt->StateBuffers(0).empty());
  EXPECT_TRUE(opt->StateBuffers(1).empty());
}

TYPED_TEST(SparseOptimizerTest, NoKindMeansSgd) {
  auto opt = this->Make(config::SparseOptimizerConfig());
  std::vector<TypeParam> w = {1, -2};
  const std::vector<TypeParam> g = {0.5, 1};
  opt->UpdateRow(0, 1, w.data(), g.data(), 2, 0.5f, 1);
  this->ExpectNear(w, {0.75, -2.5});
  EXPECT_TRUE(opt->StateBuffers(0).empty());
}

TYPED_TEST(SparseOptimizerTest, AdagradTwoSteps) {
  config::SparseOptimizerConfig config;
  config.mutable_adagrad()->set_initial_accumulator(9);
  config.mutable_adagrad()->set_eps(1);
  auto opt = this->Make(config);
  const auto& sum_sq = this->State(*opt, 0, "sum_sq");
  ASSERT_EQ(sum_sq.size(), 6u);
  this->ExpectNear(sum_sq, {9, 9, 9, 9, 9, 9});
  this->ExpectNear(this->State(*opt, 1, "sum_sq"), {9, 9});

  std::vector<TypeParam> w = {1, 2};
  const std::vector<TypeParam> g1 = {4, 0}, g2 = {-12, 4};
  // s = 9 + g1^2 = (25, 9); w -= 0.5 g1 / (sqrt(s) + 1) = (1 - 0.5 * 4 / 6, 2 - 0)
  opt->UpdateRow(0, 1, w.data(), g1.data(), 2, 0.5f, 1);
  this->ExpectNear(w, {0.6666666666666666, 2.0});
  this->ExpectNear(sum_sq, {9, 9, 25, 9, 9, 9});
  // s = (25 + 144, 9 + 16) = (169, 25); w -= 0.5 * (-12 / 14, 4 / 6)
  opt->UpdateRow(0, 1, w.data(), g2.data(), 2, 0.5f, 2);
  this->ExpectNear(w, {1.0952380952380953, 1.6666666666666667});
  this->ExpectNear(sum_sq, {9, 9, 169, 25, 9, 9});
  this->ExpectNear(this->State(*opt, 1, "sum_sq"), {9, 9});
}

TYPED_TEST(SparseOptimizerTest, RowwiseAdagradTwoSteps) {
  config::SparseOptimizerConfig config;
  config.mutable_rowwise_adagrad()->set_initial_accumulator(11);
  config.mutable_rowwise_adagrad()->set_eps(1);
  auto opt = this->Make(config);
  const auto& h = this->State(*opt, 0, "row_sum_sq");
  this->ExpectNear(h, {11, 11, 11});
  this->ExpectNear(this->State(*opt, 1, "row_sum_sq"), {11, 11});

  std::vector<TypeParam> w = {1, 2};
  const std::vector<TypeParam> g1 = {1, 7}, g2 = {8, -8};
  // h = 11 + (1 + 49) / 2 = 36; w -= (1, 7) / (6 + 1)
  opt->UpdateRow(0, 1, w.data(), g1.data(), 2, 1.0f, 1);
  this->ExpectNear(w, {0.8571428571428571, 1.0});
  this->ExpectNear(h, {11, 36, 11});
  // h = 36 + (64 + 64) / 2 = 100; w -= (8, -8) / (10 + 1)
  opt->UpdateRow(0, 1, w.data(), g2.data(), 2, 1.0f, 2);
  this->ExpectNear(w, {0.12987012987012986, 1.7272727272727273});
  this->ExpectNear(h, {11, 100, 11});
  this->ExpectNear(this->State(*opt, 1, "row_sum_sq"), {11, 11});
}

TYPED_TEST(SparseOptimizerTest, AdamTwoSteps) {
  config::SparseOptimizerConfig config;
  config.mutable_adam()->set_beta1(0.5f);
  config.mutable_adam()->set_beta2(0.75f);
  config.mutable_adam()->set_eps(0.25f);
  auto opt = this->Make(config);
  const auto& m = this->State(*opt, 0, "exp_avg");
  const auto& v = this->State(*opt, 0, "exp_avg_sq");
  this->ExpectNear(m, {0, 0, 0, 0, 0, 0});
  this->ExpectNear(v, {0, 0, 0, 0, 0, 0});

  std::vector<TypeParam> w = {1, 2};
  const std::vector<TypeParam> g1 = {2, -4}, g2 = {1, 0};
  // m = 0.5 g1 = (1, -2); v = 0.25 g1^2 = (1, 4); bias corrections 0.5 and 0.25:
  // w -= (2, -4) / ((2, 4) + 0.25) = (8 / 9, -16 / 17)
  opt->UpdateRow(0, 1, w.data(), g1.data(), 2, 1.0f, 1);
  this->ExpectNear(w, {0.1111111111111111, 2.9411764705882355});
  this->ExpectNear(m, {0, 0, 1, -2, 0, 0});
  this->ExpectNear(v, {0, 0, 1, 4, 0, 0});
  // m = (1, -1); v = (0.75 + 0.25, 3) = (1, 3); bias corrections 0.75 and 0.4375:
  // w -= 0.5 (4/3, -4/3) / (sqrt((1, 3) / 0.4375) + 0.25)
  opt->UpdateRow(0, 1, w.data(), g2.data(), 2, 0.5f, 2);
  this->ExpectNear(w, {-0.26727733308737295, 3.1735766847600915});
  this->ExpectNear(m, {0, 0, 1, -1, 0, 0});
  this->ExpectNear(v, {0, 0, 1, 3, 0, 0});
  this->ExpectNear(this->State(*opt, 1, "exp_avg"), {0, 0});
  this->ExpectNear(this->State(*opt, 1, "exp_avg_sq"), {0, 0});
}

TYPED_TEST(SparseOptimizerTest, AdamBiasCorrectionUsesTheGlobalStep) {
  config::SparseOptimizerConfig config;
  config.mutable_adam()->set_beta1(0.5f);
  config.mutable_adam()->set_beta2(0.75f);
  config.mutable_adam()->set_eps(0.25f);
  auto opt = this->Make(config);
  // A row first touched at step 3: m = 1, v = 1, bias corrections 1 - 0.5^3 = 0.875 and
  // 1 - 0.75^3 = 0.578125; w -= (1 / 0.875) / (sqrt(1 / 0.578125) + 0.25).
  std::vector<TypeParam> w = {0.5};
  const std::vector<TypeParam> g = {2};
  opt->UpdateRow(1, 0, w.data(), g.data(), 1, 1.0f, 3);
  this->ExpectNear(w, {-0.23017062252502196});
  this->ExpectNear(this->State(*opt, 1, "exp_avg"), {1, 0});
  this->ExpectNear(this->State(*opt, 1, "exp_avg_sq"), {1, 0});
  this->ExpectNear(this->State(*opt, 0, "exp_avg"), {0, 0, 0, 0, 0, 0});
}

TYPED_TEST(SparseOptimizerTest, StateBuffersNamesAndSizes) {
  config::SparseOptimizerConfig adagrad, rowwise, adam;
  adagrad.mutable_adagrad();
  rowwise.mutable_rowwise_adagrad();
  adam.mutable_adam();
  auto names_and_sizes = [&](const config::SparseOptimizerConfig& c, int32_t table) {
    std::vector<std::pair<std::string, size_t>> out;
    auto opt = this->Make(c);
    for (const auto& [name, buffer] : opt->StateBuffers(table))
      out.emplace_back(name, buffer->size());
    return out;
  };
  using P = std::pair<std::string, size_t>;
  EXPECT_THAT(names_and_sizes(adagrad, 0), ElementsAre(P{"sum_sq", 6}));
  EXPECT_THAT(names_and_sizes(rowwise, 1), ElementsAre(P{"row_sum_sq", 2}));
  EXPECT_THAT(names_and_sizes(adam, 0), ElementsAre(P{"exp_avg", 6}, P{"exp_avg_sq", 6}));
  EXPECT_THAT(names_and_sizes(adam, 1), ElementsAre(P{"exp_avg", 2}, P{"exp_avg_sq", 2}));

  for (const auto* c : {&adagrad, &rowwise, &adam}) {
    auto opt = this->Make(*c);
    try {
      opt->StateBuffers(2);
      ADD_FAILURE() << "table 2 accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), StatusCode::kOutOfRange);
    }
  }
}

// The message of the dlrm::Error (kInvalidArgument) that building the optimizer throws.
std::string RejectionMessage(const config::SparseOptimizerConfig& config,
                             const std::vector<TableShape>& shapes = kShapes) {
  try {
    MakeSparseOptimizer<float>(config, shapes);
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), StatusCode::kInvalidArgument);
    return e.what();
  }
  ADD_FAILURE() << "accepted: " << config.ShortDebugString();
  return "";
}

TEST(SparseOptimizerValidation, RejectsBadHyperparametersNamingTheField) {
  config::SparseOptimizerConfig c;
  c.set_learning_rate(-1);
  EXPECT_THAT(RejectionMessage(c), HasSubstr("sparse_optimizer.learning_rate"));

  c.Clear();
  c.mutable_adagrad()->set_eps(0);
  EXPECT_THAT(RejectionMessage(c), HasSubstr("sparse_optimizer.adagrad.eps must be"));
  c.Clear();
  c.mutable_adagrad()->set_initial_accumulator(-0.5f);
  EXPECT_THAT(RejectionMessage(c),
              HasSubstr("sparse_optimizer.adagrad.initial_accumulator must be finite and >= 0, "
                        "got -0.5"));

  c.Clear();
  c.mutable_rowwise_adagrad()->set_eps(NAN);
  EXPECT_THAT(RejectionMessage(c), HasSubstr("sparse_optimizer.rowwise_adagrad.eps"));
  c.Clear();
  c.mutable_rowwise_adagrad()->set_initial_accumulator(INFINITY);
  EXPECT_THAT(RejectionMessage(c),
              HasSubstr("sparse_optimizer.rowwise_adagrad.initial_accumulator"));

  c.Clear();
  c.mutable_adam()->set_beta2(1);
  EXPECT_EQ(RejectionMessage(c), "sparse_optimizer.adam.beta2 must be in [0, 1), got 1");
  c.Clear();
  c.mutable_adam()->set_beta1(-0.5f);
  EXPECT_EQ(RejectionMessage(c), "sparse_optimizer.adam.beta1 must be in [0, 1), got -0.5");
  c.Clear();
  c.mutable_adam()->set_beta1(NAN);
  EXPECT_THAT(RejectionMessage(c), HasSubstr("sparse_optimizer.adam.beta1"));
  c.Clear();
  c.mutable_adam()->set_eps(-1e-8f);
  EXPECT_THAT(RejectionMessage(c), HasSubstr("sparse_optimizer.adam.eps"));

  EXPECT_THAT(RejectionMessage(config::SparseOptimizerConfig(), {{3, 2}, {-1, 4}}),
              HasSubstr("tables[1].num_rows must be >= 0, got -1"));
  EXPECT_THAT(RejectionMessage(config::SparseOptimizerConfig(), {{3, 0}}),
              HasSubstr("tables[0].dim"));
}

TEST(SparseOptimizerValidation, AcceptsDefaultsAndEdgeValues) {
  config::SparseOptimizerConfig c;
  EXPECT_NE(MakeSparseOptimizer<float>(c, kShapes), nullptr);
  c.mutable_adagrad();
  EXPECT_NE(MakeSparseOptimizer<double>(c, kShapes), nullptr);
  c.mutable_rowwise_adagrad();
  EXPECT_NE(MakeSparseOptimizer<float>(c, kShapes), nullptr);
  c.mutable_adam()->set_beta1(0);
  c.mutable_adam()->set_beta2(0);
  EXPECT_NE(MakeSparseOptimizer<double>(c, kShapes), nullptr);
  EXPECT_NE(MakeSparseOptimizer<float>(c, {}), nullptr);
  const auto stateless = MakeSparseOptimizer<float>(c, {{0, 4}});  // a quantized table's
  for (const auto& [name, buffer] : stateless->StateBuffers(0))
    EXPECT_TRUE(buffer->empty()) << name;
}

}  // namespace
}  // namespace dlrm

namespace dlrm {
namespace {

// ResetRow (a DYNAMIC table's row handed to a new id) returns exactly that row's state to
// a fresh optimizer's, for every kind; other rows keep theirs.
TEST(SparseOptimizerResetRow, ReturnsOneRowToTheFreshState) {
  const char* const kinds[] = {"sgd {}", "adagrad { initial_accumulator: 0.25 }",
                               "rowwise_adagrad { initial_accumulator: 0.5 }", "adam {}"};
  for (const char* kind : kinds) {
    config::SparseOptimizerConfig config;
    ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(kind, &config)) << kind;
    auto fresh = MakeSparseOptimizer<float>(config, kShapes);
    auto used = MakeSparseOptimizer<float>(config, kShapes);
    float weights[2] = {1, 2};
    const float grad[2] = {0.5f, -1};
    for (const int64_t row : {0, 1, 2}) used->UpdateRow(0, row, weights, grad, 2, 0.1f, 1);
    used->ResetRow(0, 1);
    for (size_t b = 0; b < fresh->StateBuffers(0).size(); ++b) {
      const std::vector<float>& f = *fresh->StateBuffers(0)[b].second;
      const std::vector<float>& u = *used->StateBuffers(0)[b].second;
      const size_t width = f.size() / 3;
      for (size_t i = 0; i < f.size(); ++i) {
        if (i / width == 1)
          EXPECT_EQ(u[i], f[i]) << kind << " row 1 was reset";
        else
          EXPECT_NE(u[i], f[i]) << kind << " rows 0 and 2 keep their state";
      }
    }
  }
}

}  // namespace
}  // namespace dlrm

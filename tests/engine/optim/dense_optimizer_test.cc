// Dense optimizers against hand-computed PyTorch (torch.optim) trajectories.
//
// Every case runs two steps on w = [1, -2] with gradients g1 = [0.5, 0.25] and
// g2 = [-1, 2] (unless stated) and lr = 0.1. Expected values were worked out by hand from
// the torch.optim update rules; the derivations are in the comments.
#include "engine/optim/dense_optimizer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "engine/core/status.h"

namespace dlrm {
namespace {

using ::testing::HasSubstr;

template <typename T>
class DenseOptimizerTest : public ::testing::Test {
 protected:
  // Config hyperparameters are float (0.1f != 0.1), so results carry ~1e-8 relative error
  // even in double; a wrong formula is off by far more than this.
  static constexpr double kTol = std::is_same_v<T, float> ? 2e-5 : 1e-6;

  // Runs two steps and checks w after each.
  void ExpectTwoSteps(const config::DenseOptimizerConfig& cfg, std::vector<double> g1,
                      std::vector<double> g2, std::vector<double> after1,
                      std::vector<double> after2) {
    auto opt = MakeDenseOptimizer<T>(cfg, 2);
    std::vector<T> w = {T(1), T(-2)};
    const std::vector<T> grad1(g1.begin(), g1.end()), grad2(g2.begin(), g2.end());
    opt->Update(w.data(), grad1.data(), 0, 2, cfg.learning_rate(), 1);
    EXPECT_NEAR(w[0], after1[0], kTol) << "step 1, w[0]";
    EXPECT_NEAR(w[1], after1[1], kTol) << "step 1, w[1]";
    opt->Update(w.data(), grad2.data(), 0, 2, cfg.learning_rate(), 2);
    EXPECT_NEAR(w[0], after2[0], kTol) << "step 2, w[0]";
    EXPECT_NEAR(w[1], after2[1], kTol) << "step 2, w[1]";
  }
  void ExpectTwoSteps(const config::DenseOptimizerConfig& cfg, std::vector<double> after1,
                      std::vector<double> after2) {
    ExpectTwoSteps(cfg, {0.5, 0.25}, {-1, 2}, after1, after2);
  }
};

using Types = ::testing::Types<float, double>;
TYPED_TEST_SUITE(DenseOptimizerTest, Types);

config::DenseOptimizerConfig Lr01() {
  config::DenseOptimizerConfig cfg;
  cfg.set_learning_rate(0.1f);
  return cfg;
}

TYPED_TEST(DenseOptimizerTest, PlainSgdWhenNoKindIsSet) {
  // w -= 0.1 g:  [1 - 0.05, -2 - 0.025] = [0.95, -2.025]
  //              [0.95 + 0.1, -2.025 - 0.2] = [1.05, -2.225]
  this->ExpectTwoSteps(Lr01(), {0.95, -2.025}, {1.05, -2.225});
  auto opt = MakeDenseOptimizer<TypeParam>(Lr01(), 2);
  EXPECT_TRUE(opt->StateBuffers().empty());
}

TYPED_TEST(DenseOptimizerTest, SgdMomentum) {
  auto cfg = Lr01();
  cfg.mutable_sgd()->set_momentum(0.9f);
  // step 1: buf = g1 = [0.5, 0.25]; w = [0.95, -2.025]
  // step 2: buf = 0.9 buf + g2 = [0.45 - 1, 0.225 + 2] = [-0.55, 2.225]
  //         w -= 0.1 buf = [0.95 + 0.055, -2.025 - 0.2225] = [1.005, -2.2475]
  this->ExpectTwoSteps(cfg, {0.95, -2.025}, {1.005, -2.2475});
}

TYPED_TEST(DenseOptimizerTest, SgdNesterov) {
  auto cfg = Lr01();
  cfg.mutable_sgd()->set_momentum(0.9f);
  cfg.mutable_sgd()->set_nesterov(true);
  // step 1: buf = g1; d = g1 + 0.9 buf = 1.9 g1 = [0.95, 0.475]; w = [0.905, -2.0475]
  // step 2: buf = [-0.55, 2.225]; d = g2 + 0.9 buf = [-1.495, 4.0025]
  //         w = [0.905 + 0.1495, -2.0475 - 0.40025] = [1.0545, -2.44775]
  this->ExpectTwoSteps(cfg, {0.905, -2.0475}, {1.0545, -2.44775});
}

TYPED_TEST(DenseOptimizerTest, SgdWeightDecay) {
  auto cfg = Lr01();
  cfg.mutable_sgd()->set_weight_decay(0.1f);
  // step 1: g = g1 + 0.1 w = [0.6, 0.05]; w = [0.94, -2.005]
  // step 2: g = g2 + 0.1 w = [-0.906, 1.7995]; w = [1.0306, -2.18495]
  this->ExpectTwoSteps(cfg, {0.94, -2.005}, {1.0306, -2.18495});
}

TYPED_TEST(DenseOptimizerTest, SgdMomentumWithWeightDecay) {
  auto cfg = Lr01();
  cfg.mutable_sgd()->set_momentum(0.9f);
  cfg.mutable_sgd()->set_weight_decay(0.1f);
  // Decay joins the gradient before the momentum buffer.
  // step 1: g = [0.6, 0.05] = buf; w = [0.94, -2.005]
  // step 2: g = [-0.906, 1.7995]; buf = 0.9 [0.6, 0.05] + g = [-0.366, 1.8445]
  //         w = [0.94 + 0.0366, -2.005 - 0.18445] = [0.9766, -2.18945]
  this->ExpectTwoSteps(cfg, {0.94, -2.005}, {0.9766, -2.18945});
}

TYPED_TEST(DenseOptimizerTest, Adagrad) {
  auto cfg = Lr01();
  cfg.mutable_adagrad();
  // g1 = [0.3, 0.4]: sum = [0.09, 0.16], sqrt = [0.3, 0.4]; w -= 0.1 * 1 -> [0.9, -2.1]
  // g2 = [0.4, 0.3]: sum = [0.25, 0.25], sqrt = 0.5; w -= 0.1 g / 0.5 -> [0.82, -2.16]
  this->ExpectTwoSteps(cfg, {0.3, 0.4}, {0.4, 0.3}, {0.9, -2.1}, {0.82, -2.16});
}

TYPED_TEST(DenseOptimizerTest, AdagradAccumulatorEpsAndWeightDecay) {
  auto cfg = Lr01();
  cfg.mutable_adagrad()->set_initial_accumulator(0.5f);
  cfg.mutable_adagrad()->set_eps(0.01f);
  cfg.mutable_adagrad()->set_weight_decay(0.1f);
  // step 1: g = [0.3 + 0.1, 0.4 - 0.2] = [0.4, 0.2]; sum = [0.66, 0.54]
  //   w0 = 1 - 0.04 / (0.812404 + 0.01) = 0.951362095
  //   w1 = -2 - 0.02 / (0.734847 + 0.01) = -2.026851155
  // step 2: g = [0.4 + 0.0951362, 0.3 - 0.2026851] = [0.4951362, 0.0973149]
  //   sum = [0.905160, 0.549470]
  //   w0 = 0.951362095 - 0.04951362 / (0.951399 + 0.01) = 0.899860454
  //   w1 = -2.026851155 - 0.00973149 / (0.741262 + 0.01) = -2.039804667
  this->ExpectTwoSteps(cfg, {0.3, 0.4}, {0.4, 0.3}, {0.951362094835, -2.02685115476},
                       {0.899860453867, -2.03980466654});
}

TYPED_TEST(DenseOptimizerTest, Adam) {
  auto cfg = Lr01();
  cfg.mutable_adam();  // beta1 0.9, beta2 0.999, eps 1e-8
  // step 1: m_hat = g, sqrt(v_hat) = |g|: w -= 0.1 g / (|g| + 1e-8) = [0.9, -2.1]
  // step 2: m = 0.9 * 0.1 g1 + 0.1 g2 = [-0.055, 0.2225]; m_hat = m / 0.19
  //   v = 0.999 * 0.001 g1^2 + 0.001 g2^2 = [0.00124975, 0.0040624375]; v_hat = v / 0.001999
  //   w0 = 0.9 - 0.1 * (-0.2894737) / 0.7906881 = 0.936610354
  //   w1 = -2.1 - 0.1 * 1.1710526 / 1.4255648 = -2.182146571
  this->ExpectTwoSteps(cfg, {0.900000002, -2.099999996}, {0.936610354241, -2.18214657126});
}

TYPED_TEST(DenseOptimizerTest, AdamEpsIsAddedAfterBiasCorrection) {
  auto cfg = Lr01();
  cfg.mutable_adam()->set_eps(0.1f);
  // A large eps tells sqrt(v_hat) + eps apart from (sqrt(v) + eps) / sqrt(1 - beta2^t).
  // step 1: w0 = 1 - 0.1 * 0.5 / 0.6 = 0.916667; w1 = -2 - 0.1 * 0.25 / 0.35 = -2.071429
  // step 2: w0 = 0.916667 + 0.1 * 0.2894737 / 0.8906881 = 0.949166674
  //         w1 = -2.071429 - 0.1 * 1.1710526 / 1.5255648 = -2.148190481
  this->ExpectTwoSteps(cfg, {0.916666666667, -2.07142857143}, {0.949166674265, -2.14819048066});
}

TYPED_TEST(DenseOptimizerTest, AdamL2WeightDecay) {
  auto cfg = Lr01();
  cfg.mutable_adam()->set_weight_decay(0.1f);
  // Decay is added to the gradient (torch.optim.Adam): g = g + 0.1 w.
  // step 1: g = [0.6, 0.05]; w = [0.9, -2.1] (to 1e-8)
  // step 2: g = [-1 + 0.09, 2 - 0.21] = [-0.91, 1.79]
  //   m = [0.054 - 0.091, 0.0045 + 0.179] = [-0.037, 0.1835]; m_hat = m / 0.19
  //   v = [0.999 * 0.00036 + 0.001 * 0.8281, 0.999 * 0.0000025 + 0.001 * 3.2041]
  //   w0 = 0.9 + 0.1 * 0.1947368 / 0.7708223 = 0.925263519
  //   w1 = -2.1 - 0.1 * 0.9657895 / 1.2665310 = -2.176254683
  this->ExpectTwoSteps(cfg, {0.900000001667, -2.09999998}, {0.925263519446, -2.17625468344});
}

TYPED_TEST(DenseOptimizerTest, AdamW) {
  auto cfg = Lr01();
  cfg.mutable_adam()->set_weight_decay(0.1f);
  cfg.mutable_adam()->set_decoupled_weight_decay(true);
  // w *= 1 - 0.1 * 0.1 = 0.99 before the plain Adam step (moments as in the Adam test).
  // step 1: w = [0.99 - 0.1, -1.98 - 0.1] = [0.89, -2.08]
  // step 2: w0 = 0.89 * 0.99 + 0.0366103542 = 0.917710354
  //         w1 = -2.08 * 0.99 - 0.0821465713 = -2.141346571
  this->ExpectTwoSteps(cfg, {0.890000002, -2.079999996}, {0.917710354221, -2.1413465713});
}

TYPED_TEST(DenseOptimizerTest, StateBufferNamesAndInitialValues) {
  auto names = [](DenseOptimizer<TypeParam>& opt) {
    std::vector<std::string> out;
    for (auto& [name, buffer] : opt.StateBuffers()) {
      EXPECT_EQ(buffer->size(), 5u) << name;
      out.push_back(name);
    }
    return out;
  };
  auto cfg = Lr01();
  cfg.mutable_sgd()->set_momentum(0.5f);
  auto sgd = MakeDenseOptimizer<TypeParam>(cfg, 5);
  EXPECT_THAT(names(*sgd), ::testing::ElementsAre("momentum"));
  EXPECT_THAT(*sgd->StateBuffers()[0].second, ::testing::Each(TypeParam(0)));

  cfg.mutable_adagrad()->set_initial_accumulator(0.25f);
  auto adagrad = MakeDenseOptimizer<TypeParam>(cfg, 5);
  EXPECT_THAT(names(*adagrad), ::testing::ElementsAre("sum_sq"));
  EXPECT_THAT(*adagrad->StateBuffers()[0].second, ::testing::Each(TypeParam(0.25)));

  cfg.mutable_adam();
  auto adam = MakeDenseOptimizer<TypeParam>(cfg, 5);
  EXPECT_THAT(names(*adam), ::testing::ElementsAre("exp_avg", "exp_avg_sq"));
}

TYPED_TEST(DenseOptimizerTest, RestoredStateContinuesTheSameTrajectory) {
  // What a checkpoint does: copy the state buffers into a fresh optimizer.
  auto cfg = Lr01();
  cfg.mutable_adam()->set_weight_decay(0.01f);
  const std::vector<TypeParam> g1 = {0.5, -0.25, 2}, g2 = {-1, 0.75, 0.125};
  std::vector<TypeParam> w = {1, 2, 3};
  auto a = MakeDenseOptimizer<TypeParam>(cfg, 3);
  a->Update(w.data(), g1.data(), 0, 3, 0.1f, 1);
  auto b = MakeDenseOptimizer<TypeParam>(cfg, 3);
  auto a_state = a->StateBuffers(), b_state = b->StateBuffers();
  for (size_t k = 0; k < a_state.size(); ++k) *b_state[k].second = *a_state[k].second;
  std::vector<TypeParam> w_b = w;
  a->Update(w.data(), g2.data(), 0, 3, 0.1f, 2);
  b->Update(w_b.data(), g2.data(), 0, 3, 0.1f, 2);
  EXPECT_EQ(w, w_b);
}

TYPED_TEST(DenseOptimizerTest, DisjointRangesEqualOneFullUpdate) {
  std::vector<config::DenseOptimizerConfig> configs(4, Lr01());
  configs[1].mutable_sgd()->set_momentum(0.9f);
  configs[2].mutable_adagrad()->set_weight_decay(0.01f);
  configs[3].mutable_adam()->set_weight_decay(0.01f);
  const std::vector<TypeParam> g = {0.5, -0.25, 2, 1, -3, 0.125, 0.75};
  for (const auto& cfg : configs) {
    auto whole = MakeDenseOptimizer<TypeParam>(cfg, g.size());
    auto split = MakeDenseOptimizer<TypeParam>(cfg, g.size());
    std::vector<TypeParam> w1 = {1, 2, 3, 4, 5, 6, 7}, w2 = w1;
    for (int64_t step = 1; step <= 3; ++step) {
      whole->Update(w1.data(), g.data(), 0, g.size(), 0.1f, step);
      split->Update(w2.data(), g.data(), 4, g.size(), 0.1f, step);
      split->Update(w2.data(), g.data(), 0, 4, 0.1f, step);
    }
    EXPECT_EQ(w1, w2) << cfg.ShortDebugString();
    EXPECT_NE(w1, (std::vector<TypeParam>{1, 2, 3, 4, 5, 6, 7}));
  }
}

TYPED_TEST(DenseOptimizerTest, UpdateRejectsBadRangeAndStep) {
  auto opt = MakeDenseOptimizer<TypeParam>(Lr01(), 2);
  std::vector<TypeParam> w(3), g(3);
  EXPECT_THROW(opt->Update(w.data(), g.data(), 0, 3, 0.1f, 1), Error);
  EXPECT_THROW(opt->Update(w.data(), g.data(), 2, 1, 0.1f, 1), Error);
  EXPECT_THROW(opt->Update(w.data(), g.data(), 0, 2, 0.1f, 0), Error);
}

// ---- validation ------------------------------------------------------------------

void ExpectRejected(const config::DenseOptimizerConfig& cfg, const std::string& message) {
  try {
    MakeDenseOptimizer<float>(cfg, 4);
    ADD_FAILURE() << "accepted " << cfg.ShortDebugString();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(e.what(), HasSubstr(message)) << cfg.ShortDebugString();
  }
}

TEST(DenseOptimizerValidationTest, RejectsBadHyperparametersNamingTheField) {
  config::DenseOptimizerConfig cfg;
  cfg.set_learning_rate(-0.1f);
  ExpectRejected(cfg, "dense_optimizer.learning_rate must be finite and >= 0, got -0.1");
  cfg.set_learning_rate(std::numeric_limits<float>::quiet_NaN());
  ExpectRejected(cfg, "dense_optimizer.learning_rate");

  cfg = Lr01();
  cfg.mutable_sgd()->set_momentum(-0.5f);
  ExpectRejected(cfg, "dense_optimizer.sgd.momentum must be finite and >= 0, got -0.5");
  cfg = Lr01();
  cfg.mutable_sgd()->set_weight_decay(-1);
  ExpectRejected(cfg, "dense_optimizer.sgd.weight_decay");
  cfg = Lr01();
  cfg.mutable_sgd()->set_nesterov(true);
  ExpectRejected(cfg, "dense_optimizer.sgd.nesterov requires sgd.momentum > 0");

  cfg = Lr01();
  cfg.mutable_adagrad()->set_eps(-1e-10f);
  ExpectRejected(cfg, "dense_optimizer.adagrad.eps");
  cfg = Lr01();
  cfg.mutable_adagrad()->set_initial_accumulator(-1);
  ExpectRejected(cfg, "dense_optimizer.adagrad.initial_accumulator");
  cfg = Lr01();
  cfg.mutable_adagrad()->set_weight_decay(-1);
  ExpectRejected(cfg, "dense_optimizer.adagrad.weight_decay");

  cfg = Lr01();
  cfg.mutable_adam()->set_beta1(1.5f);
  ExpectRejected(cfg, "dense_optimizer.adam.beta1 must be in [0, 1), got 1.5");
  cfg.mutable_adam()->set_beta1(-0.1f);
  ExpectRejected(cfg, "dense_optimizer.adam.beta1");
  cfg = Lr01();
  cfg.mutable_adam()->set_beta2(1.0f);
  ExpectRejected(cfg, "dense_optimizer.adam.beta2 must be in [0, 1), got 1");
  cfg = Lr01();
  cfg.mutable_adam()->set_eps(-1e-8f);
  ExpectRejected(cfg, "dense_optimizer.adam.eps");
  cfg = Lr01();
  cfg.mutable_adam()->set_weight_decay(-0.01f);
  ExpectRejected(cfg, "dense_optimizer.adam.weight_decay");

  // Adversarial finding 2: eps 0 was accepted, and the first step divided 0 by 0 for every
  // parameter whose gradient was still zero, leaving NaN parameters behind an OK.
  cfg = Lr01();
  cfg.mutable_adagrad()->set_eps(0.0f);
  ExpectRejected(cfg, "dense_optimizer.adagrad.eps must be finite and > 0, got 0");
  cfg = Lr01();
  cfg.mutable_adam()->set_eps(0.0f);
  ExpectRejected(cfg, "dense_optimizer.adam.eps must be finite and > 0, got 0");
}

TEST(DenseOptimizerValidationTest, AcceptsBoundaryValues) {
  config::DenseOptimizerConfig cfg;
  cfg.set_learning_rate(0);
  EXPECT_NO_THROW(MakeDenseOptimizer<float>(cfg, 1));
  cfg.mutable_adam()->set_beta1(0);
  cfg.mutable_adam()->set_beta2(0);
  cfg.mutable_adam()->set_eps(std::numeric_limits<float>::denorm_min());  // eps 0: NaN
  EXPECT_NO_THROW(MakeDenseOptimizer<float>(cfg, 1));
}

}  // namespace
}  // namespace dlrm

// Central finite-difference checks of every dense backward pass, run in double.
//
// Each layer's output is reduced to a scalar L = sum_i r_i * out_i with fixed random
// weights r, so dL/dout = r is what the backward pass receives. Every input and
// parameter is then perturbed by +-h and (L+ - L-) / 2h compared with the analytic
// gradient.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <tuple>
#include <vector>

#include "engine/core/philox.h"
#include "engine/core/status.h"
#include "engine/dense/cross_net.h"
#include "engine/dense/interaction.h"
#include "engine/dense/linear.h"
#include "engine/dense/loss.h"
#include "engine/dense/mlp.h"

namespace dlrm {
namespace {

constexpr double kStep = 1e-6;
constexpr double kRelTol = 1e-6;

std::vector<double> Random(size_t n, uint64_t stream, double scale = 1.0) {
  const CounterRng rng(2024, stream, 0);
  std::vector<double> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = scale * (2 * rng.Uniform(i) - 1);
  return v;
}

double WeightedSum(const double* out, const std::vector<double>& r) {
  double sum = 0;
  for (size_t i = 0; i < r.size(); ++i) sum += r[i] * out[i];
  return sum;
}

// Compares analytic[i] with the central difference of loss() in values[begin + i].
// The tolerance is relative, floored at 1 so that gradients near zero are judged by the
// absolute error of the difference quotient.
void ExpectGradient(const std::string& name, std::vector<double>& values, size_t begin,
                    const std::vector<double>& analytic, const std::function<double()>& loss) {
  ASSERT_LE(begin + analytic.size(), values.size()) << name;
  for (size_t i = 0; i < analytic.size(); ++i) {
    double& v = values[begin + i];
    const double saved = v;
    v = saved + kStep;
    const double plus = loss();
    v = saved - kStep;
    const double minus = loss();
    v = saved;
    const double numeric = (plus - minus) / (2 * kStep);
    EXPECT_NEAR(analytic[i], numeric, kRelTol * std::max(1.0, std::abs(numeric)))
        << name << "[" << i << "]";
  }
}

void ExpectGradient(const std::string& name, std::vector<double>& values,
                    const std::vector<double>& analytic, const std::function<double()>& loss) {
  ASSERT_EQ(values.size(), analytic.size()) << name;
  ExpectGradient(name, values, 0, analytic, loss);
}

// A gradient check is vacuous if the gradient is all zeros.
bool AnyNonZero(const std::vector<double>& v) {
  for (double x : v) {
    if (x != 0) return true;
  }
  return false;
}

class LinearGradcheckTest : public ::testing::TestWithParam<Activation> {};

TEST_P(LinearGradcheckTest, AllInputs) {
  const Activation act = GetParam();
  const int64_t n = 3;
  const int in = 4, out = 5;
  auto x = Random(n * in, 1), W = Random(out * in, 2), b = Random(out, 3);
  // Biases kept at least 0.05 from the ReLU's kink, where the derivative is undefined.
  for (double& v : b) v += v >= 0 ? 0.05 : -0.05;
  const auto r = Random(n * out, 4);
  std::vector<double> y(n * out);
  auto loss = [&] {
    LinearForward(x.data(), n, in, out, W.data(), b.data(), act, y.data());
    return WeightedSum(y.data(), r);
  };
  loss();
  std::vector<double> dx(n * in), dW(out * in), db(out), dy = r;
  LinearBackward(x.data(), y.data(), dy.data(), n, in, out, W.data(), act, dx.data(), dW.data(),
                 db.data());
  ExpectGradient("dx", x, dx, loss);
  ExpectGradient("dW", W, dW, loss);
  ExpectGradient("db", b, db, loss);
  EXPECT_TRUE(AnyNonZero(dW));
}

INSTANTIATE_TEST_SUITE_P(Activations, LinearGradcheckTest,
                         ::testing::Values(Activation::kNone, Activation::kRelu));

class MlpGradcheckTest : public ::testing::TestWithParam<bool> {};

TEST_P(MlpGradcheckTest, ThreeLayers) {
  const bool relu_last = GetParam();
  const int64_t n = 4;
  const size_t offset = 3;  // the MLP sits inside a larger parameter vector
  const Mlp<double> mlp(5, {6, 4, 3}, relu_last, offset);
  std::vector<double> params(offset + mlp.num_params() + 2);
  mlp.Initialize(params.data(), 11, 0);
  // Biases pushed positive so that most units are active and their gradients checked.
  for (int l = 0; l < mlp.num_layers(); ++l) {
    for (int j = 0; j < mlp.layer_out(l); ++j) params[mlp.bias_offset(l) + j] += 0.3;
  }
  auto x = Random(n * mlp.in_dim(), 7);
  const auto r = Random(n * mlp.out_dim(), 8);
  std::vector<double> acts(n * mlp.activations_per_row());
  auto loss = [&] { return WeightedSum(mlp.Forward(params.data(), x.data(), n, acts.data()), r); };
  loss();

  std::vector<double> grads(params.size(), -123.0), dx(x.size());
  std::vector<double> scratch(n * mlp.scratch_per_row());
  mlp.Backward(params.data(), x.data(), acts.data(), r.data(), n, grads.data(), dx.data(),
               scratch.data());
  const std::vector<double> param_grads(grads.begin() + offset,
                                        grads.begin() + offset + mlp.num_params());
  ExpectGradient("dparams", params, offset, param_grads, loss);
  ExpectGradient("dx", x, dx, loss);
  EXPECT_TRUE(AnyNonZero(dx));
  // Outside its range the MLP writes nothing.
  EXPECT_EQ(grads[0], -123.0);
  EXPECT_EQ(grads[offset - 1], -123.0);
  EXPECT_EQ(grads.back(), -123.0);
  // Each layer's weight gradient is checked for real, not as all zeros.
  for (int l = 0; l < mlp.num_layers(); ++l) {
    const size_t w = mlp.weight_offset(l);
    EXPECT_TRUE(
        AnyNonZero(std::vector<double>(grads.begin() + w, grads.begin() + mlp.bias_offset(l))))
        << "layer " << l;
  }
}

INSTANTIATE_TEST_SUITE_P(ReluLast, MlpGradcheckTest, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "Relu" : "Linear"; });

void CheckInteraction(config::ModelConfig::Interaction kind, int d, std::vector<int> dims,
                      bool self = false) {
  const int64_t n = 3;
  const Interaction<double> inter(kind, d, dims, self);
  auto x = Random(n * d, 9);
  auto pooled = Random(n * inter.pooled_width(), 10);
  const auto r = Random(n * inter.out_dim(), 11);
  std::vector<double> out(n * inter.out_dim());
  auto loss = [&] {
    inter.Forward(x.data(), pooled.data(), n, out.data());
    return WeightedSum(out.data(), r);
  };
  std::vector<double> dx(x.size(), 55.0), dpooled(pooled.size(), 55.0);
  inter.Backward(x.data(), pooled.data(), r.data(), n, dx.data(), dpooled.data());
  ExpectGradient("dx", x, dx, loss);
  ExpectGradient("dpooled", pooled, dpooled, loss);
}

TEST(DenseGradcheckTest, InteractionDot) {
  CheckInteraction(config::ModelConfig::DOT, 3, {3, 3, 3});
}

TEST(DenseGradcheckTest, InteractionDotWithSelfInteraction) {
  CheckInteraction(config::ModelConfig::DOT, 3, {3, 3, 3}, true);
}

TEST(DenseGradcheckTest, InteractionCatUnequalDims) {
  CheckInteraction(config::ModelConfig::CAT, 2, {3, 1, 4});
}

TEST(DenseGradcheckTest, BceWithLogits) {
  // Includes |z| = 50, where 1 - sigmoid(z) underflows in the naive form.
  std::vector<double> z = {0.3, -1.7, 4.0, -3.2, 50, -50, 50, -50, 12.5};
  const std::vector<float> y = {1, 0, 0, 1, 0, 1, 1, 0, 0.25f};
  const double scale = 0.25;
  auto loss = [&] {
    return scale * BceWithLogits<double>(z.data(), y.data(), z.size(), 1.0, nullptr);
  };
  std::vector<double> dz(z.size());
  const double value = BceWithLogits(z.data(), y.data(), z.size(), scale, dz.data());
  EXPECT_TRUE(std::isfinite(value));
  ExpectGradient("dlogits", z, dz, loss);
}

TEST(DenseGradcheckTest, BceTinyGradientsAtLargeLogitsAreRelativelyAccurate) {
  // With the right label at |z| = 50 the gradient is ~2e-22; check it relative to itself.
  std::vector<double> z = {50, -50};
  const std::vector<float> y = {1, 0};
  std::vector<double> dz(2);
  BceWithLogits(z.data(), y.data(), 2, 1.0, dz.data());
  for (size_t i = 0; i < z.size(); ++i) {
    const double saved = z[i];
    z[i] = saved + kStep;
    const double plus = BceWithLogits<double>(&z[i], &y[i], 1, 1.0, nullptr);
    z[i] = saved - kStep;
    const double minus = BceWithLogits<double>(&z[i], &y[i], 1, 1.0, nullptr);
    z[i] = saved;
    const double numeric = (plus - minus) / (2 * kStep);
    EXPECT_NE(dz[i], 0.0);
    EXPECT_NEAR(dz[i], numeric, kRelTol * std::abs(numeric)) << i;
  }
}

}  // namespace
}  // namespace dlrm

namespace dlrm {
namespace {

// DCNv2's cross network: every weight, bias and input gradient, low rank and full rank,
// against central differences of L = sum r_i * x_L,i; and the forward against the
// formula written out per row.
TEST(CrossNetGradcheck, EveryGradientMatchesCentralDifferences) {
  constexpr int kDim = 6;
  constexpr int64_t kRows = 5;
  for (const int rank : {3, 0}) {
    const CrossNet<double> net(kDim, 3, rank, /*param_offset=*/4);
    std::vector<double> params(4 + net.num_params());
    net.Initialize(params.data(), 11, 0);
    // Non-zero biases, so that their paths are exercised too.
    for (int l = 0; l < 3; ++l)
      for (int j = 0; j < kDim; ++j) params[net.bias_offset(l) + j] = 0.1 * (j - l);
    std::vector<double> x0 = Random(kRows * kDim, 301);
    const std::vector<double> r = Random(kRows * kDim, 302);
    std::vector<double> acts(kRows * net.activations_per_row());
    const auto loss = [&] {
      return WeightedSum(net.Forward(params.data(), x0.data(), kRows, acts.data()), r);
    };
    // The forward, row by row from the definition.
    const double* out = net.Forward(params.data(), x0.data(), kRows, acts.data());
    for (int64_t row = 0; row < kRows; ++row) {
      std::vector<double> x(x0.begin() + row * kDim, x0.begin() + (row + 1) * kDim);
      for (int l = 0; l < 3; ++l) {
        std::vector<double> y(kDim), h(static_cast<size_t>(rank));
        for (int k = 0; k < rank; ++k)
          for (int j = 0; j < kDim; ++j) h[k] += params[net.v_offset(l) + k * kDim + j] * x[j];
        for (int i = 0; i < kDim; ++i) {
          y[i] = params[net.bias_offset(l) + i];
          if (rank == 0)
            for (int j = 0; j < kDim; ++j) y[i] += params[net.w_offset(l) + i * kDim + j] * x[j];
          for (int k = 0; k < rank; ++k) y[i] += params[net.u_offset(l) + i * rank + k] * h[k];
        }
        for (int i = 0; i < kDim; ++i) x[i] = x0[row * kDim + i] * y[i] + x[i];
      }
      for (int i = 0; i < kDim; ++i) EXPECT_NEAR(out[row * kDim + i], x[i], 1e-12) << row;
    }
    std::vector<double> grads(params.size(), -7.0), dx0(x0.size());
    std::vector<double> scratch(kRows * net.scratch_per_row());
    net.Forward(params.data(), x0.data(), kRows, acts.data());
    net.Backward(params.data(), x0.data(), acts.data(), r.data(), kRows, grads.data(), dx0.data(),
                 scratch.data());
    const std::string name = rank == 0 ? "full rank " : "rank 3 ";
    ExpectGradient(name + "params", params, 4, std::vector<double>(grads.begin() + 4, grads.end()),
                   loss);
    ExpectGradient(name + "x0", x0, 0, dx0, loss);
    EXPECT_EQ(grads[0], -7.0) << "outside its range nothing is written";
  }
}

TEST(CrossNetGradcheck, BadShapesAreRefusedNamingThem) {
  for (const auto& [dim, layers, rank, needle] :
       {std::tuple<int, int, int, const char*>{0, 1, 0, "dim must be in"},
        {8, 0, 0, "num_layers must be in"},
        {8, 65, 0, "num_layers must be in"},
        {8, 2, 9, "rank must be 0 (full rank) or in [1, dim = 8]"},
        {8, 2, -1, "rank must be 0"}}) {
    try {
      CrossNet<float> net(dim, layers, rank, 0);
      ADD_FAILURE() << needle;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), StatusCode::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace dlrm

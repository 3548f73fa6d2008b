// Forward values of the dense layers against small hand-computed examples, GEMM against a
// naive reference, and Mlp layout / initialization.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "engine/core/cpu_features.h"
#include "engine/core/philox.h"
#include "engine/core/status.h"
#include "engine/dense/dot_interaction_avx2.h"
#include "engine/dense/gemm.h"
#include "engine/dense/interaction.h"
#include "engine/dense/linear.h"
#include "engine/dense/loss.h"
#include "engine/dense/mlp.h"

namespace dlrm {
namespace {

using ::testing::DoubleNear;
using ::testing::ElementsAre;
using ::testing::FloatNear;
using ::testing::HasSubstr;
using ::testing::Pointwise;

template <typename T>
std::vector<T> RandomVector(size_t n, uint64_t stream) {
  const CounterRng rng(7, stream, 0);
  std::vector<T> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<T>(2 * rng.Uniform(i) - 1);
  return v;
}

// ---- Gemm ------------------------------------------------------------------------

// C = alpha op(A) op(B) + beta C, straight from the definition.
template <typename T>
void NaiveGemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t lda,
               const T* B, int64_t ldb, T beta, T* C, int64_t ldc) {
  for (int64_t i = 0; i < M; ++i) {
    for (int64_t j = 0; j < N; ++j) {
      double sum = 0;
      for (int64_t k = 0; k < K; ++k) {
        const T a = ta ? A[k * lda + i] : A[i * lda + k];
        const T b = tb ? B[j * ldb + k] : B[k * ldb + j];
        sum += static_cast<double>(a) * b;
      }
      C[i * ldc + j] = static_cast<T>(alpha * sum + beta * C[i * ldc + j]);
    }
  }
}

template <typename T>
class GemmTest : public ::testing::Test {};
using FloatTypes = ::testing::Types<float, double>;
TYPED_TEST_SUITE(GemmTest, FloatTypes);

TYPED_TEST(GemmTest, MatchesNaiveForEveryTransposeWithPaddedStrides) {
  using T = TypeParam;
  const int64_t M = 5, N = 7, K = 6, pad = 3;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      const int64_t lda = (ta ? M : K) + pad, ldb = (tb ? K : N) + pad, ldc = N + pad;
      const auto A = RandomVector<T>((ta ? K : M) * lda, 1);
      const auto B = RandomVector<T>((tb ? N : K) * ldb, 2);
      auto C = RandomVector<T>(M * ldc, 3);
      auto expected = C;
      Gemm<T>(ta, tb, M, N, K, T(0.5), A.data(), lda, B.data(), ldb, T(2), C.data(), ldc);
      NaiveGemm<T>(ta, tb, M, N, K, T(0.5), A.data(), lda, B.data(), ldb, T(2), expected.data(),
                   ldc);
      const double tol = std::is_same_v<T, float> ? 1e-5 : 1e-12;
      EXPECT_THAT(C, Pointwise(DoubleNear(tol), expected)) << "ta=" << ta << " tb=" << tb;
    }
  }
}

TYPED_TEST(GemmTest, EmptyInnerDimensionOnlyScalesC) {
  using T = TypeParam;
  std::vector<T> C = {1, std::numeric_limits<T>::quiet_NaN(), 3, 4};
  Gemm<T>(false, false, 2, 2, 0, T(1), nullptr, 0, nullptr, 0, T(0), C.data(), 2);
  EXPECT_THAT(C, ElementsAre(0, 0, 0, 0));  // beta = 0 clears, even NaN
  C = {1, 2, 3, 4};
  Gemm<T>(false, false, 2, 2, 0, T(1), nullptr, 0, nullptr, 0, T(3), C.data(), 2);
  EXPECT_THAT(C, ElementsAre(3, 6, 9, 12));
}

TYPED_TEST(GemmTest, EmptyOutputTouchesNothing) {
  using T = TypeParam;
  std::vector<T> C = {5};
  Gemm<T>(false, false, 0, 1, 3, T(1), nullptr, 3, nullptr, 1, T(0), C.data(), 1);
  EXPECT_THAT(C, ElementsAre(5));
}

TYPED_TEST(GemmTest, RejectsLeadingDimensionBelowRowWidth) {
  using T = TypeParam;
  std::vector<T> A(6), B(6), C(4);
  EXPECT_THROW(Gemm<T>(false, false, 2, 2, 3, T(1), A.data(), 2, B.data(), 2, T(0), C.data(), 2),
               Error);
  EXPECT_THROW(Gemm<T>(false, false, 2, 2, 3, T(1), A.data(), 3, B.data(), 2, T(0), C.data(), 1),
               Error);
}

TEST(GemmDeterminismTest, BitwiseIdenticalOnAnyThread) {
  // The engine relies on a chunk's GEMM not depending on which thread runs it.
  const int64_t M = 64, N = 96, K = 80;
  const auto A = RandomVector<float>(M * K, 4);
  const auto B = RandomVector<float>(K * N, 5);
  std::vector<float> here(M * N), there(M * N);
  Gemm<float>(false, false, M, N, K, 1.f, A.data(), K, B.data(), N, 0.f, here.data(), N);
  std::thread worker([&] {
    Gemm<float>(false, false, M, N, K, 1.f, A.data(), K, B.data(), N, 0.f, there.data(), N);
  });
  worker.join();
  EXPECT_EQ(here, there);
}

// ---- Linear / ReLU ---------------------------------------------------------------

TEST(LinearTest, ForwardHandComputed) {
  const std::vector<double> x = {1, 2,       //
                                 3, -1};     // n = 2, in = 2
  const std::vector<double> W = {1,   0,     //
                                 2,   -1,    //
                                 0.5, 0.5};  // out = 3
  const std::vector<double> b = {0.1, 0.2, -0.3};
  std::vector<double> y(6);
  LinearForward(x.data(), 2, 2, 3, W.data(), b.data(), Activation::kNone, y.data());
  // row 0: [1 + 0.1, 2 - 2 + 0.2, 0.5 + 1 - 0.3]; row 1: [3 + 0.1, 6 + 1 + 0.2, 1.5 - 0.5 - 0.3]
  EXPECT_THAT(y, Pointwise(DoubleNear(1e-12), std::vector<double>{1.1, 0.2, 1.2, 3.1, 7.2, 0.7}));
}

TEST(LinearTest, BackwardHandComputedAndOverwrites) {
  const std::vector<double> x = {1, 2, 3, -1};
  const std::vector<double> W = {1, 0, 2, -1, 0.5, 0.5};
  const std::vector<double> dy = {1, 0, 2,    //
                                  0, 1, -1};  // [n = 2 x out = 3]
  std::vector<double> dx(4, 99), dW(6, 99), db(3, 99);
  std::vector<double> g = dy;
  LinearBackward<double>(x.data(), nullptr, g.data(), 2, 2, 3, W.data(), Activation::kNone,
                         dx.data(), dW.data(), db.data());
  EXPECT_EQ(g, dy) << "without an activation the output gradient is left as it is";
  // dW = dy^T x: [1*1 + 0*3, 1*2 + 0*-1], [0 + 3, 0 - 1], [2 - 3, 4 + 1]
  EXPECT_THAT(dW, ElementsAre(1, 2, 3, -1, -1, 5));
  EXPECT_THAT(db, ElementsAre(1, 1, 1));
  // dx = dy W: [1*[1,0] + 2*[0.5,0.5]], [[2,-1] - [0.5,0.5]]
  EXPECT_THAT(dx, ElementsAre(2, 1, 1.5, -1.5));

  std::vector<double> dW2(6, -7), db2(3, -7);
  LinearBackward<double>(x.data(), nullptr, g.data(), 2, 2, 3, W.data(), Activation::kNone, nullptr,
                         dW2.data(), db2.data());
  EXPECT_EQ(dW2, dW);
  EXPECT_EQ(db2, db);
}

TEST(LinearTest, FloatForwardMatchesDouble) {
  const int64_t n = 9;
  const int in = 13, out = 11;
  const auto x = RandomVector<float>(n * in, 10), W = RandomVector<float>(out * in, 11),
             b = RandomVector<float>(out, 12);
  std::vector<float> y(n * out);
  LinearForward(x.data(), n, in, out, W.data(), b.data(), Activation::kRelu, y.data());
  const std::vector<double> xd(x.begin(), x.end()), Wd(W.begin(), W.end()), bd(b.begin(), b.end());
  std::vector<double> yd(n * out);
  LinearForward(xd.data(), n, in, out, Wd.data(), bd.data(), Activation::kRelu, yd.data());
  EXPECT_THAT(y, Pointwise(DoubleNear(1e-5), std::vector<float>(yd.begin(), yd.end())));
}

TEST(ReluTest, ForwardAndBackward) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  // Two rows of width 3; bias [0.5, 0, -1].
  const std::vector<float> bias = {0.5f, 0, -1};
  std::vector<float> y = {-1,     0, 3,  //
                          -0.25f, 2, 0.5f};
  BiasActivationForward(y.data(), bias.data(), 2, 3, Activation::kRelu);
  EXPECT_THAT(y, ElementsAre(0, 0, 2, 0.25f, 2, 0));
  std::vector<float> dy = {1, 2, 3, 4, 5, 6}, db(3, 99);
  ActivationBackwardBiasGrad(y.data(), dy.data(), 2, 3, Activation::kRelu, db.data());
  EXPECT_THAT(dy, ElementsAre(0, 0, 3, 4, 5, 0));
  EXPECT_THAT(db, ElementsAre(4, 5, 3));

  std::vector<float> plain = {-1, 2}, plain_bias = {1, 1};
  BiasActivationForward(plain.data(), plain_bias.data(), 1, 2, Activation::kNone);
  EXPECT_THAT(plain, ElementsAre(0, 3));

  std::vector<float> bad = {nan, -nan};
  const std::vector<float> zero = {0, 0};
  BiasActivationForward(bad.data(), zero.data(), 1, 2, Activation::kRelu);
  EXPECT_TRUE(std::isnan(bad[0]) && std::isnan(bad[1])) << "ReLU must not hide a NaN";
}

// The element-wise sweeps are vectorized; widths that are not a multiple of any vector
// length and long rows must give the same values as the definition.
TEST(ReluTest, MatchesDefinitionAtOddWidths) {
  for (int out : {1, 7, 13, 33, 515}) {
    const int64_t n = 5;
    const auto pre = RandomVector<float>(n * out, 20 + out), b = RandomVector<float>(out, 40);
    const auto grad = RandomVector<float>(n * out, 60 + out);
    std::vector<float> y = pre, dy = grad, db(out);
    BiasActivationForward(y.data(), b.data(), n, out, Activation::kRelu);
    ActivationBackwardBiasGrad(y.data(), dy.data(), n, out, Activation::kRelu, db.data());
    std::vector<float> want_db(out, 0.0f);
    for (int64_t r = 0; r < n; ++r) {
      for (int j = 0; j < out; ++j) {
        const float v = pre[r * out + j] + b[j];
        ASSERT_EQ(y[r * out + j], v < 0 ? 0.0f : v) << "out " << out;
        const float g = v <= 0 ? 0.0f : grad[r * out + j];
        ASSERT_EQ(dy[r * out + j], g);
        want_db[j] += g;
      }
    }
    EXPECT_EQ(db, want_db) << "out " << out;
  }
}

// ---- Mlp -------------------------------------------------------------------------

TEST(MlpTest, ParameterLayout) {
  const Mlp<float> mlp(3, {4, 2}, false, 10);
  EXPECT_EQ(mlp.in_dim(), 3);
  EXPECT_EQ(mlp.out_dim(), 2);
  EXPECT_EQ(mlp.num_layers(), 2);
  EXPECT_EQ(mlp.layer_in(0), 3);
  EXPECT_EQ(mlp.layer_in(1), 4);
  EXPECT_EQ(mlp.layer_out(1), 2);
  EXPECT_EQ(mlp.weight_offset(0), 10u);
  EXPECT_EQ(mlp.bias_offset(0), 22u);    // 10 + 4*3
  EXPECT_EQ(mlp.weight_offset(1), 26u);  // + 4
  EXPECT_EQ(mlp.bias_offset(1), 34u);    // + 2*4
  EXPECT_EQ(mlp.num_params(), 26u);      // 16 + 10
  EXPECT_EQ(mlp.param_offset(), 10u);
  EXPECT_EQ(mlp.activations_per_row(), 6u);
  EXPECT_GE(mlp.scratch_per_row(), 4u);
}

TEST(MlpTest, RejectsBadShapes) {
  EXPECT_THROW(Mlp<float>(0, {4}, false, 0), Error);
  EXPECT_THROW(Mlp<float>(3, {}, false, 0), Error);
  try {
    Mlp<float>(3, {4, 0, 1}, false, 0);
    ADD_FAILURE() << "accepted a zero-width layer";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(e.what(), HasSubstr("layer_sizes[1]"));
  }
}

// in 2 -> 2 (ReLU) -> 1, parameters at offset 1 of a padded vector.
// W0 = [[1, -1], [2, 0]], b0 = [0, -1], W1 = [[1, 3]], b1 = [b1].
std::vector<double> SmallMlpParams(double b1) { return {42, 1, -1, 2, 0, 0, -1, 1, 3, b1, 42}; }

TEST(MlpTest, ForwardHandComputed) {
  const Mlp<double> mlp(2, {2, 1}, false, 1);
  const auto params = SmallMlpParams(0.5);
  const std::vector<double> x = {1, 2, 3, 1};
  std::vector<double> acts(2 * mlp.activations_per_row());
  const double* out = mlp.Forward(params.data(), x.data(), 2, acts.data());
  // row 0: h = relu([1 - 2, 2 - 1]) = [0, 1]; out = 0 + 3 + 0.5 = 3.5
  // row 1: h = relu([3 - 1, 6 - 1]) = [2, 5]; out = 2 + 15 + 0.5 = 17.5
  EXPECT_THAT(acts, ElementsAre(0, 1, 2, 5, 3.5, 17.5));  // layer-major blocks
  EXPECT_EQ(out, acts.data() + 4);
}

TEST(MlpTest, ReluLastClampsTheOutput) {
  const auto params = SmallMlpParams(-5);
  const std::vector<double> x = {1, 2};
  std::vector<double> acts(3);
  const Mlp<double> linear_last(2, {2, 1}, false, 1);
  EXPECT_EQ(*linear_last.Forward(params.data(), x.data(), 1, acts.data()), -2);
  const Mlp<double> relu_last(2, {2, 1}, true, 1);
  EXPECT_EQ(*relu_last.Forward(params.data(), x.data(), 1, acts.data()), 0);
}

TEST(MlpTest, BackwardHandComputed) {
  const Mlp<double> mlp(2, {2, 1}, false, 1);
  const auto params = SmallMlpParams(0.5);
  const std::vector<double> x = {1, 2};
  std::vector<double> acts(mlp.activations_per_row());
  mlp.Forward(params.data(), x.data(), 1, acts.data());  // h = [0, 1]
  const std::vector<double> dy = {2};
  std::vector<double> grads(params.size(), 99), dx(2);
  std::vector<double> scratch(mlp.scratch_per_row());
  mlp.Backward(params.data(), x.data(), acts.data(), dy.data(), 1, grads.data(), dx.data(),
               scratch.data());
  // dW1 = dy h = [0, 2]; db1 = 2; dh = dy W1 = [2, 6], masked by h > 0 -> [0, 6]
  // dW0 = dh^T x = [[0, 0], [6, 12]]; db0 = [0, 6]; dx = dh W0 = 6 * [2, 0]
  EXPECT_THAT(grads, ElementsAre(99, 0, 0, 6, 12, 0, 6, 0, 2, 2, 99));
  EXPECT_THAT(dx, ElementsAre(12, 0));
}

TEST(MlpTest, InitializeIsDeterministicPerSeedAndStream) {
  const Mlp<float> mlp(8, {16, 4}, false, 3);
  const size_t size = 3 + mlp.num_params() + 2;
  auto init = [&](uint64_t seed, uint64_t stream_base) {
    std::vector<float> p(size, 7.f);
    mlp.Initialize(p.data(), seed, stream_base);
    return p;
  };
  const auto a = init(1, 0);
  EXPECT_EQ(a, init(1, 0));
  EXPECT_NE(a, init(2, 0));
  EXPECT_NE(a, init(1, 10));
  // Only this MLP's range is written.
  EXPECT_THAT(std::vector<float>(a.begin(), a.begin() + 3), ElementsAre(7, 7, 7));
  EXPECT_THAT(std::vector<float>(a.end() - 2, a.end()), ElementsAre(7, 7));
  // Every tensor is filled (no element left at the sentinel) and tensors differ.
  EXPECT_EQ(std::count(a.begin() + 3, a.end() - 2, 7.f), 0);
  EXPECT_NE(a[mlp.weight_offset(0)], a[mlp.weight_offset(1)]);
}

TEST(MlpTest, InitializeMatchesAcrossPrecisions) {
  const Mlp<float> f(5, {3}, false, 0);
  const Mlp<double> d(5, {3}, false, 0);
  std::vector<float> pf(f.num_params());
  std::vector<double> pd(d.num_params());
  f.Initialize(pf.data(), 9, 0);
  d.Initialize(pd.data(), 9, 0);
  for (size_t i = 0; i < pf.size(); ++i) EXPECT_FLOAT_EQ(pf[i], static_cast<float>(pd[i]));
}

TEST(MlpTest, InitializeHasTheReferenceStddev) {
  const int in = 300, out = 500, out2 = 1000;
  const Mlp<double> mlp(in, {out, out2}, false, 0);
  std::vector<double> p(mlp.num_params());
  mlp.Initialize(p.data(), 123, 0);
  auto moments = [&](size_t begin, size_t count) {
    double sum = 0, sum_sq = 0;
    for (size_t i = begin; i < begin + count; ++i) {
      sum += p[i];
      sum_sq += p[i] * p[i];
    }
    const double mean = sum / count;
    return std::make_pair(mean, std::sqrt(sum_sq / count - mean * mean));
  };
  // W0: 150000 draws -> stddev estimate within ~0.2%; b1: 1000 draws -> ~2.2%.
  const auto [w0_mean, w0_std] = moments(mlp.weight_offset(0), size_t{out} * in);
  EXPECT_NEAR(w0_std, std::sqrt(2.0 / (in + out)), 0.02 * std::sqrt(2.0 / (in + out)));
  EXPECT_NEAR(w0_mean, 0, 0.01 * w0_std);
  const auto [w1_mean, w1_std] = moments(mlp.weight_offset(1), size_t{out2} * out);
  EXPECT_NEAR(w1_std, std::sqrt(2.0 / (out + out2)), 0.02 * std::sqrt(2.0 / (out + out2)));
  EXPECT_NEAR(w1_mean, 0, 0.01 * w1_std);
  const auto [b0_mean, b0_std] = moments(mlp.bias_offset(0), out);
  EXPECT_NEAR(b0_std, std::sqrt(1.0 / out), 0.15 * std::sqrt(1.0 / out));
  EXPECT_NEAR(b0_mean, 0, 0.2 * b0_std);
  const auto [b1_mean, b1_std] = moments(mlp.bias_offset(1), out2);
  EXPECT_NEAR(b1_std, std::sqrt(1.0 / out2), 0.1 * std::sqrt(1.0 / out2));
  EXPECT_NEAR(b1_mean, 0, 0.15 * b1_std);
}

// ---- Interaction -----------------------------------------------------------------

TEST(InteractionTest, DotOutputOrderHandComputed) {
  const Interaction<double> dot(config::ModelConfig::DOT, 2, {2, 2});
  EXPECT_EQ(dot.out_dim(), 5);  // 2 + 2*3/2
  EXPECT_EQ(dot.pooled_width(), 4);
  EXPECT_EQ(dot.feature_offset(1), 2);
  // Row 0: x = [1, 2], e1 = [3, 4], e2 = [5, 6]. Row 1: x = [1, 0], e1 = [0, 1], e2 = [2, 2].
  const std::vector<double> x = {1, 2, 1, 0};
  const std::vector<double> pooled = {3, 4, 5, 6, 0, 1, 2, 2};
  std::vector<double> out(10);
  dot.Forward(x.data(), pooled.data(), 2, out.data());
  // [x, <e1,x>, <e2,x>, <e2,e1>]: 3+8 = 11, 5+12 = 17, 15+24 = 39; row 1: 0, 2, 2
  EXPECT_THAT(out, ElementsAre(1, 2, 11, 17, 39, 1, 0, 0, 2, 2));
}

TEST(InteractionTest, DotBackwardHandComputed) {
  const Interaction<double> dot(config::ModelConfig::DOT, 2, {2});
  const std::vector<double> x = {1, 2}, pooled = {3, 4}, dout = {0.5, -1, 2};
  std::vector<double> dx(2, 99), dpooled(2, 99);
  dot.Backward(x.data(), pooled.data(), dout.data(), 1, dx.data(), dpooled.data());
  // out = [x, <e1, x>]: dx = dout[:2] + 2 e1 = [6.5, 7]; de1 = 2 x = [2, 4]
  EXPECT_THAT(dx, ElementsAre(6.5, 7));
  EXPECT_THAT(dpooled, ElementsAre(2, 4));
}

TEST(InteractionTest, DotWithSelfInteractionHandComputed) {
  const Interaction<double> dot(config::ModelConfig::DOT, 2, {2}, true);
  EXPECT_EQ(dot.out_dim(), 5);  // 2 + 2*3/2: (x, x), (e1, x), (e1, e1)
  const std::vector<double> x = {1, 2}, pooled = {3, 4};
  std::vector<double> out(5);
  dot.Forward(x.data(), pooled.data(), 1, out.data());
  EXPECT_THAT(out, ElementsAre(1, 2, 5, 11, 25));
  const std::vector<double> dout = {0.5, -1, 2, 3, -1};
  std::vector<double> dx(2, 99), dpooled(2, 99);
  dot.Backward(x.data(), pooled.data(), dout.data(), 1, dx.data(), dpooled.data());
  // dx = dout[:2] + 2 * 2 x + 3 e1 = [0.5 + 4 + 9, -1 + 8 + 12]; de1 = 3 x + 2 * -1 e1
  EXPECT_THAT(dx, ElementsAre(13.5, 19));
  EXPECT_THAT(dpooled, ElementsAre(3 - 6, 6 - 8));
  EXPECT_THROW(Interaction<double>(config::ModelConfig::CAT, 2, {2}, true), Error);
}

TEST(InteractionTest, CatHandComputedWithUnequalDims) {
  const Interaction<float> cat(config::ModelConfig::CAT, 2, {3, 1});
  EXPECT_EQ(cat.out_dim(), 6);
  EXPECT_EQ(cat.pooled_width(), 4);
  EXPECT_EQ(cat.feature_offset(0), 0);
  EXPECT_EQ(cat.feature_offset(1), 3);
  const std::vector<float> x = {1, 2}, pooled = {3, 4, 5, 6};
  std::vector<float> out(6);
  cat.Forward(x.data(), pooled.data(), 1, out.data());
  EXPECT_THAT(out, ElementsAre(1, 2, 3, 4, 5, 6));
  const std::vector<float> dout = {-1, -2, -3, -4, -5, -6};
  std::vector<float> dx(2), dpooled(4);
  cat.Backward(x.data(), pooled.data(), dout.data(), 1, dx.data(), dpooled.data());
  EXPECT_THAT(dx, ElementsAre(-1, -2));
  EXPECT_THAT(dpooled, ElementsAre(-3, -4, -5, -6));
}

TEST(InteractionTest, DotRejectsUnequalDims) {
  try {
    Interaction<float>(config::ModelConfig::DOT, 4, {4, 3, 4});
    ADD_FAILURE() << "DOT accepted unequal dims";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(e.what(), HasSubstr("DOT"));
    EXPECT_THAT(e.what(), HasSubstr("feature 1 has dim 3"));
  }
}

TEST(InteractionTest, RejectsNonPositiveDims) {
  EXPECT_THROW(Interaction<float>(config::ModelConfig::CAT, 0, {4}), Error);
  try {
    Interaction<float>(config::ModelConfig::CAT, 4, {4, -1});
    ADD_FAILURE() << "accepted a negative feature dim";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("feature 1 dim must be > 0"));
  }
}

// ---- loss ------------------------------------------------------------------------

TEST(BceLossTest, HandComputedValuesAndGradient) {
  const std::vector<double> z = {0, 2, -1};
  const std::vector<float> y = {1, 0, 0.25f};
  std::vector<double> dz(3);
  const double loss = BceWithLogits(z.data(), y.data(), 3, 0.5, dz.data());
  // log 2; 2 + log(1 + e^-2) = -log(1 - sigmoid 2); 0.25 + log(1 + e^-1)
  const double expected = std::log(2.0) + 2.126928011042972 + 0.25 + 0.313261687518223;
  EXPECT_NEAR(loss, expected, 1e-12);
  // (sigmoid(z) - y) / 2
  EXPECT_THAT(dz,
              Pointwise(DoubleNear(1e-12), std::vector<double>{-0.25, 0.880797077977882 / 2,
                                                               (0.268941421369995 - 0.25) / 2}));
  EXPECT_EQ(BceWithLogits<double>(z.data(), y.data(), 3, 1.0, nullptr), loss);
}

template <typename T>
class BceLargeLogitTest : public ::testing::Test {};
TYPED_TEST_SUITE(BceLargeLogitTest, FloatTypes);

TYPED_TEST(BceLargeLogitTest, FiniteAndCorrectWhereTheNaiveFormOverflows) {
  using T = TypeParam;
  // Naively -log(1 - sigmoid(50)) is log(0) in float and exp(1000) overflows in double.
  const std::vector<T> z = {50, -50, 1000, -1000, 50, -50};
  const std::vector<float> y = {0, 1, 0, 1, 1, 0};
  std::vector<T> dz(6);
  std::vector<double> each(6);
  for (size_t i = 0; i < z.size(); ++i) {
    each[i] = BceWithLogits(&z[i], &y[i], 1, T(1), &dz[i]);
    EXPECT_TRUE(std::isfinite(each[i])) << i;
  }
  EXPECT_NEAR(each[0], 50, 1e-12);
  EXPECT_NEAR(each[1], 50, 1e-12);
  EXPECT_NEAR(each[2], 1000, 1e-12);
  EXPECT_NEAR(each[3], 1000, 1e-12);
  EXPECT_NEAR(each[4], std::exp(-50.0), 1e-30);  // log1p(e^-50)
  EXPECT_EQ(each[5], each[4]);
  const std::vector<double> expected_dz = {1, -1, 1, -1, 0, 0};
  for (size_t i = 0; i < z.size(); ++i) EXPECT_NEAR(dz[i], expected_dz[i], 1e-20) << i;
}

// ---- the vectorized DOT interaction ------------------------------------------------

// Float DOT (vectorized where the CPU allows: dims a multiple of 8) against the portable
// double code, forward and backward, for feature counts that fill vector groups exactly,
// partly, and not at all.
TEST(InteractionTest, FloatDotMatchesDouble) {
  for (int d : {4, 8, 16, 32}) {
    for (int features : {1, 7, 8, 9, 26}) {
      const int64_t n = 3;
      const Interaction<float> f(config::ModelConfig::DOT, d, std::vector<int>(features, d));
      const Interaction<double> g(config::ModelConfig::DOT, d, std::vector<int>(features, d));
      const auto x = RandomVector<float>(n * d, 80);
      const auto pooled = RandomVector<float>(n * features * d, 81);
      const auto dout = RandomVector<float>(n * f.out_dim(), 82);
      const std::vector<double> xd(x.begin(), x.end()), pd(pooled.begin(), pooled.end()),
          doutd(dout.begin(), dout.end());
      std::vector<float> out(n * f.out_dim()), dx(n * d), dp(pooled.size());
      std::vector<double> outd(out.size()), dxd(dx.size()), dpd(dp.size());
      f.Forward(x.data(), pooled.data(), n, out.data());
      g.Forward(xd.data(), pd.data(), n, outd.data());
      f.Backward(x.data(), pooled.data(), dout.data(), n, dx.data(), dp.data());
      g.Backward(xd.data(), pd.data(), doutd.data(), n, dxd.data(), dpd.data());
      const std::string where = "d " + std::to_string(d) + " F " + std::to_string(features);
      EXPECT_THAT(out, Pointwise(FloatNear(2e-5f), std::vector<float>(outd.begin(), outd.end())))
          << where;
      EXPECT_THAT(dx, Pointwise(FloatNear(2e-5f), std::vector<float>(dxd.begin(), dxd.end())))
          << where;
      EXPECT_THAT(dp, Pointwise(FloatNear(2e-5f), std::vector<float>(dpd.begin(), dpd.end())))
          << where;
    }
  }
}

// The AVX2 kernels themselves (the class picks them only on a CPU that has AVX2 + FMA).
TEST(InteractionTest, Avx2KernelsMatchDefinition) {
  if (!CpuHasAvx2Fma()) GTEST_SKIP() << "this CPU has no AVX2 + FMA";
  for (int d : {8, 16, 24}) {
    for (int features : {1, 8, 13, 26}) {
      for (const int diagonal : {0, 1}) {  // self-interaction: the pairs (i, i) too
        const auto x = RandomVector<float>(d, 90), pooled = RandomVector<float>(features * d, 91);
        const int vectors = features + diagonal;
        const int pairs = vectors * (vectors + 1) / 2;
        const auto g = RandomVector<float>(pairs, 92);
        auto z = [&](int i) { return i == 0 ? x.data() : pooled.data() + (i - 1) * d; };
        std::vector<float> out(pairs + 1, -7.0f);  // one guard value past the end
        DotInteractionForwardAvx2(x.data(), pooled.data(), features, d, diagonal == 1, out.data());
        int p = 0;
        for (int i = 1 - diagonal; i <= features; ++i) {
          for (int j = 0; j < i + diagonal; ++j, ++p) {
            double want = 0;
            for (int k = 0; k < d; ++k) want += double(z(i)[k]) * z(j)[k];
            ASSERT_NEAR(out[p], want, 1e-5) << "pair (" << i << ", " << j << ") d " << d;
          }
        }
        EXPECT_EQ(out[pairs], -7.0f) << "wrote past the pairs";

        std::vector<float> dx(d, 0.5f), dp(features * d, 99.0f);
        std::vector<float> scratch((features + 1) * (features + 1));
        DotInteractionBackwardAvx2(x.data(), pooled.data(), g.data(), features, d, diagonal == 1,
                                   dx.data(), dp.data(), scratch.data());
        std::vector<double> want((features + 1) * d, 0.0);
        for (int k = 0; k < d; ++k) want[k] = 0.5;  // dx's pass-through part is kept
        p = 0;
        for (int i = 1 - diagonal; i <= features; ++i) {
          for (int j = 0; j < i + diagonal; ++j, ++p) {
            for (int k = 0; k < d; ++k) {
              want[i * d + k] += double(g[p]) * z(j)[k];
              want[j * d + k] += double(g[p]) * z(i)[k];
            }
          }
        }
        for (int k = 0; k < d; ++k) ASSERT_NEAR(dx[k], want[k], 1e-5) << "dx " << k;
        for (int k = 0; k < features * d; ++k) ASSERT_NEAR(dp[k], want[d + k], 1e-5) << "dp " << k;
      }
    }
  }
}

}  // namespace
}  // namespace dlrm

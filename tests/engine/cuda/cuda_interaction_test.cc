// The interaction and the loss on a CUDA device (engine/cuda/interaction.h) against the
// CPU's (engine/dense/interaction.h, loss.h) within rounding, and bitwise on repeat; the
// shape checks run everywhere.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "engine/core/philox.h"
#include "engine/core/status.h"
#include "engine/cuda/interaction.h"
#include "engine/dense/interaction.h"
#include "engine/dense/loss.h"
#include "tests/support/cuda_support.h"

namespace dlrm::cuda {
namespace {

using testing::DeviceCopy;
using ::testing::HasSubstr;

struct Outputs {
  std::vector<float> out, dx, dpooled;
};

Outputs OnDevice(const InteractionShape& s, int64_t n, const std::vector<float>& x,
                 const std::vector<float>& pooled, const std::vector<float>& dout) {
  DeviceCopy<float> d_x(x), d_p(pooled), d_dout(dout);
  // NaN where nothing is written: padding the kernels left alone shows.
  DeviceCopy<float> d_out(std::vector<float>(n * s.row_stride(), std::nanf("")));
  DeviceCopy<float> d_dx(std::vector<float>(x.size())), d_dp(std::vector<float>(pooled.size()));
  LaunchInteractionForward(s, d_x.get(), d_p.get(), n, d_out.get(), nullptr);
  LaunchInteractionBackward(s, d_x.get(), d_p.get(), d_dout.get(), n, d_dx.get(), d_dp.get(),
                            nullptr);
  return {d_out.ToHost(), d_dx.ToHost(), d_dp.ToHost()};
}

void CompareInteraction(bool dot, int d, int f, bool self = false) {
  SCOPED_TRACE(::testing::Message() << (dot ? "DOT" : "CAT") << " d=" << d << " f=" << f
                                    << (self ? " with self-interaction" : ""));
  const int64_t n = 37;
  const InteractionShape s{dot, d, f, f * d, self};
  const Interaction<float> cpu(dot ? config::ModelConfig::DOT : config::ModelConfig::CAT, d,
                               std::vector<int>(f, d), self);
  ASSERT_EQ(cpu.out_dim(), s.out_dim());
  const std::vector<float> x = testing::RandomFloats(n * d, 1),
                           pooled = testing::RandomFloats(n * f * d, 2),
                           dout = testing::RandomFloats(n * s.out_dim(), 3);
  Outputs want{std::vector<float>(n * s.out_dim()), std::vector<float>(x.size()),
               std::vector<float>(pooled.size())};
  cpu.Forward(x.data(), pooled.data(), n, want.out.data());
  cpu.Backward(x.data(), pooled.data(), dout.data(), n, want.dx.data(), want.dpooled.data());
  const Outputs got = OnDevice(s, n, x, pooled, dout);
  testing::ExpectAllNear(got.out, want.out, 1e-5f, "out");
  testing::ExpectAllNear(got.dx, want.dx, 1e-5f, "dx");
  testing::ExpectAllNear(got.dpooled, want.dpooled, 1e-5f, "dpooled");
  const Outputs again = OnDevice(s, n, x, pooled, dout);
  EXPECT_EQ(std::memcmp(got.dpooled.data(), again.dpooled.data(), got.dpooled.size() * 4), 0);
}

TEST(CudaInteractionTest, MatchesTheCpuAndRepeatsBitwise) {
  SKIP_WITHOUT_GPU();
  OpenDevice(0);
  CompareInteraction(true, 16, 8);  // the CPU's AVX2 DOT where the CPU has it
  CompareInteraction(true, 3, 5);
  CompareInteraction(true, 512, 26);  // past 48 KiB: DotForward reads in place, unstaged
  // DotBackward's sums per thread (DotBackwardPlan): 1 above, 2, 4 and 8 here; 121 vectors'
  // pair coefficients do not fit in shared memory and are read in place.
  CompareInteraction(true, 16, 26);
  CompareInteraction(true, 4, 120);
  CompareInteraction(true, 32, 26);
  CompareInteraction(true, 64, 26);  // multihot's
  CompareInteraction(true, 64, 120);
  CompareInteraction(false, 4, 3);
  // The pairs (i, i) too (DLRM's --arch-interaction-itself), staged and in place.
  CompareInteraction(true, 16, 8, /*self=*/true);
  CompareInteraction(true, 3, 5, /*self=*/true);
  CompareInteraction(true, 512, 26, /*self=*/true);
}

// The gradient of vector m's column k as interaction.h orders it: dout's x part (m = 0),
// then over j ascending the pair (m, j)'s gradient (twice that of (m, m), with self) times
// z_j[k], each product rounded and then added: what the device must give bitwise.
float DotGradientInPairOrder(const std::vector<float>& z, const float* g, int d, int f, bool self,
                             int m, int k, float start) {
  const auto row = [&](int i) { return self ? i * (i + 1) / 2 : i * (i - 1) / 2; };
  volatile float acc = start;  // volatile: no contraction into a fused multiply-add
  for (int j = 0; j <= f; ++j) {
    if (j == m && !self) continue;
    volatile float c = m >= j ? g[row(m) + j] : g[row(j) + m];
    if (j == m) c = c + c;
    volatile float product = c * z[static_cast<size_t>(j) * d + k];
    acc = acc + product;
  }
  return acc;
}

void ExpectDotBackwardInPairOrder(int d, int f, bool self) {
  SCOPED_TRACE(::testing::Message() << "d=" << d << " f=" << f << (self ? " self" : ""));
  const int64_t n = 5;
  const InteractionShape s{true, d, f, f * d, self};
  const std::vector<float> x = testing::RandomFloats(n * d, 1),
                           pooled = testing::RandomFloats(n * f * d, 2),
                           dout = testing::RandomFloats(n * s.out_dim(), 3);
  const Outputs got = OnDevice(s, n, x, pooled, dout);
  for (int64_t r = 0; r < n; ++r) {
    std::vector<float> z(x.begin() + r * d, x.begin() + (r + 1) * d);  // z_0 = x, then pooled
    z.insert(z.end(), pooled.begin() + r * f * d, pooled.begin() + (r + 1) * f * d);
    const float* row = &dout[r * s.out_dim()];
    for (int m = 0; m <= f; ++m)
      for (int k = 0; k < d; ++k) {
        const float want =
            DotGradientInPairOrder(z, row + d, d, f, self, m, k, m == 0 ? row[k] : 0);
        const float have = m == 0 ? got.dx[r * d + k] : got.dpooled[(r * f + m - 1) * d + k];
        ASSERT_EQ(std::memcmp(&have, &want, sizeof(float)), 0)
            << "sample " << r << " vector " << m << " column " << k << ": " << have << " vs "
            << want;
      }
  }
}

TEST(CudaInteractionTest, DotBackwardSumsInThePairOrderBitwise) {
  SKIP_WITHOUT_GPU();
  OpenDevice(0);
  for (const bool self : {false, true}) {
    ExpectDotBackwardInPairOrder(16, 8, self);    // one sum a thread
    ExpectDotBackwardInPairOrder(16, 26, self);   // two (one 8-byte load)
    ExpectDotBackwardInPairOrder(32, 26, self);   // four (one 16-byte load)
    ExpectDotBackwardInPairOrder(64, 26, self);   // eight (two)
    ExpectDotBackwardInPairOrder(512, 26, self);  // vectors read in place
    ExpectDotBackwardInPairOrder(4, 120, self);   // coefficients read in place, two sums
    ExpectDotBackwardInPairOrder(64, 120, self);  // and eight
  }
}

// Rows `stride` apart (the top MLP's aligned input, dense_network.h): the same values,
// zeros in the padding, and a backward that never reads dout's padding (NaN here).
void ComparePadded(InteractionShape s) {
  SCOPED_TRACE(::testing::Message() << (s.dot ? "DOT" : "CAT") << " d=" << s.bottom_dim);
  const int64_t n = 19;
  const int width = s.out_dim(), stride = width + 3;
  const std::vector<float> x = testing::RandomFloats(n * s.bottom_dim, 1),
                           pooled = testing::RandomFloats(n * s.pooled_width, 2),
                           dout = testing::RandomFloats(n * width, 3);
  std::vector<float> padded_dout(n * stride, std::nanf(""));
  for (int64_t r = 0; r < n; ++r)
    std::memcpy(&padded_dout[r * stride], &dout[r * width], width * sizeof(float));
  const Outputs want = OnDevice(s, n, x, pooled, dout);
  s.stride = stride;
  const Outputs got = OnDevice(s, n, x, pooled, padded_dout);
  for (int64_t r = 0; r < n; ++r) {
    EXPECT_EQ(std::memcmp(&got.out[r * stride], &want.out[r * width], width * sizeof(float)), 0)
        << "row " << r;
    for (int k = width; k < stride; ++k) EXPECT_EQ(got.out[r * stride + k], 0.0f) << r << "," << k;
  }
  EXPECT_EQ(got.dx, want.dx);
  EXPECT_EQ(got.dpooled, want.dpooled);
}

TEST(CudaInteractionTest, PaddedRowsHoldTheSameValuesThenZeros) {
  SKIP_WITHOUT_GPU();
  OpenDevice(0);
  ComparePadded({true, 16, 8, 16 * 8});
  ComparePadded({true, 3, 5, 15, /*self_interaction=*/true});
  ComparePadded({false, 4, 3, 12});
}

TEST(CudaBceTest, MatchesTheCpuAndRepeatsBitwise) {
  SKIP_WITHOUT_GPU();
  OpenDevice(0);
  const int64_t n = 1000;
  std::vector<float> logits = testing::RandomFloats(n, 4), labels(n);
  for (int64_t i = 0; i < n; ++i) {
    logits[i] *= 30.0f;  // large |z| too
    labels[i] = static_cast<float>(i % 3 == 0);
  }
  std::vector<float> want(n);
  const double want_sum = BceWithLogits(logits.data(), labels.data(), n, 1.0f / n, want.data());
  DeviceCopy<float> d_logits(logits), d_labels(labels), d_dl{std::vector<float>(n)};
  DeviceCopy<double> d_losses{std::vector<double>(n)}, d_sum{std::vector<double>(1)};
  for (int run = 0; run < 2; ++run) {
    LaunchBceWithLogits(d_logits.get(), d_labels.get(), n, 1.0f / n, d_dl.get(), d_losses.get(),
                        d_sum.get(), nullptr);
    const double sum = d_sum.ToHost()[0];
    EXPECT_NEAR(sum, want_sum, 1e-9 * want_sum);
    testing::ExpectAllNear(d_dl.ToHost(), want, 1e-5f, "dlogits");
  }
}

// Refused before anything reaches the device: no GPU needed.
TEST(CudaInteractionTest, BadShapesAreRefusedNamingThem) {
  try {
    LaunchInteractionForward({true, 4, 3, 10}, nullptr, nullptr, 1, nullptr, nullptr);
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(e.what(), HasSubstr("pooled_width 10 is not num_features 3 x bottom_dim 4"));
  }
  try {
    LaunchInteractionForward({false, 4, 3, 12, /*self_interaction=*/true}, nullptr, nullptr, 1,
                             nullptr, nullptr);
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(e.what(), HasSubstr("interaction CAT: self_interaction is DOT's"));
  }
  try {  // DOT of 3 vectors of 4: out_dim 4 + 6
    LaunchInteractionForward({true, 4, 3, 12, false, /*stride=*/5}, nullptr, nullptr, 1, nullptr,
                             nullptr);
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(e.what(), HasSubstr("interaction: stride 5 is less than out_dim 10"));
  }
  EXPECT_THROW(LaunchBceWithLogits(nullptr, nullptr, 0, 1.0f, nullptr, nullptr, nullptr, nullptr),
               Error);
}

}  // namespace
}  // namespace dlrm::cuda

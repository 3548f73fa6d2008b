// The AVX-512 GEMMs (engine/dense/sgemm_avx512.h), fp32 and bf16 (AVX512-BF16 and AMX):
// values against a double reference (of the bf16-rounded operands for bf16) over shapes at
// every blocking edge, the fp32 kernel's documented summation order bit for bit, and
// independence of a row's result from the call's shape (what chunked training relies on).
// Each kernel is skipped on CPUs without its instructions (AVX-512F, AVX512-BF16, AMX),
// where Gemm<float> never calls it.

#include "engine/dense/sgemm_avx512.h"

#include <gtest/gtest.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "engine/core/cpu_features.h"
#include "engine/core/philox.h"
#include "engine/dense/gemm.h"

namespace dlrm {
namespace {

std::vector<float> RandomFloats(size_t n, uint64_t stream) {
  const CounterRng rng(11, stream, 0);
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<float>(2 * rng.Uniform(i) - 1);
  return v;
}

struct Operands {
  bool ta, tb;
  int64_t M, N, K, lda, ldb, ldc;
  std::vector<float> A, B, C;
};

// Leading dimensions padded past the row width, so reads or writes outside a row show.
Operands MakeOperands(bool ta, bool tb, int64_t M, int64_t N, int64_t K, uint64_t seed) {
  Operands o{ta, tb, M, N, K, (ta ? M : K) + 3, (tb ? K : N) + 5, N + 2, {}, {}, {}};
  o.A = RandomFloats(static_cast<size_t>((ta ? K : M) * o.lda), 3 * seed);
  o.B = RandomFloats(static_cast<size_t>((tb ? N : K) * o.ldb), 3 * seed + 1);
  o.C = RandomFloats(static_cast<size_t>(M * o.ldc), 3 * seed + 2);
  return o;
}

float OpA(const Operands& o, int64_t i, int64_t k) {
  return o.ta ? o.A[k * o.lda + i] : o.A[i * o.lda + k];
}
float OpB(const Operands& o, int64_t k, int64_t j) {
  return o.tb ? o.B[j * o.ldb + k] : o.B[k * o.ldb + j];
}

// x rounded to the nearest bf16, ties to even (what the bf16 kernel multiplies).
float RoundToBf16(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  bits = (bits + 0x7FFFu + ((bits >> 16) & 1u)) & 0xFFFF0000u;  // finite x only
  std::memcpy(&x, &bits, sizeof bits);
  return x;
}

enum class Kernel { kFp32, kBf16, kAmx };

// The calling thread's tile palette (sttilecfg): 0 once its tiles are released.
#if defined(__x86_64__)
__attribute__((target("amx-tile"))) int StoredTilePalette() {
  alignas(64) unsigned char config[64] = {};
  _tile_storeconfig(config);
  return config[0];
}
#else
int StoredTilePalette() { return 0; }
#endif

bool IsBf16(Kernel kernel) { return kernel != Kernel::kFp32; }

void Multiply(Operands& o, float alpha, float beta, Kernel kernel = Kernel::kFp32) {
  const auto fn = kernel == Kernel::kFp32   ? SgemmAvx512
                  : kernel == Kernel::kBf16 ? SbgemmAvx512
                                            : SbgemmAmx;
  fn(o.ta, o.tb, o.M, o.N, o.K, alpha, o.A.data(), o.lda, o.B.data(), o.ldb, beta, o.C.data(),
     o.ldc);
}

// Whether this CPU runs the kernel, and whether Gemm<float> chooses it for its precision.
bool Runs(Kernel kernel) {
  switch (kernel) {
    case Kernel::kFp32: return CpuHasAvx512();
    case Kernel::kBf16: return CpuHasAvx512Bf16();
    case Kernel::kAmx: return CpuHasAmxBf16();
  }
  return false;
}
bool GemmChooses(Kernel kernel) {
  return Runs(kernel) && (kernel != Kernel::kBf16 || !CpuHasAmxBf16());
}

std::string Shape(const Operands& o) {
  return "ta=" + std::to_string(o.ta) + " tb=" + std::to_string(o.tb) +
         " M=" + std::to_string(o.M) + " N=" + std::to_string(o.N) + " K=" + std::to_string(o.K);
}

class SgemmAvx512Test : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!CpuHasAvx512()) GTEST_SKIP() << "this CPU has no AVX-512F (or DLRM_MAX_ISA caps it)";
  }
};

// Every kernel, each where the CPU runs it.
class AnyGemmAvx512Test : public ::testing::TestWithParam<Kernel> {
 protected:
  void SetUp() override {
    if (!Runs(GetParam()))
      GTEST_SKIP() << "this CPU lacks the kernel's instructions (AVX-512F, AVX512-BF16, AMX), "
                      "or DLRM_MAX_ISA caps them";
  }
  GemmPrecision precision() const {
    return IsBf16(GetParam()) ? GemmPrecision::kBf16 : GemmPrecision::kFp32;
  }
  // For the tests of Gemm<float>, which skip where it chooses another kernel.
  bool GemmTakesAnother() const { return !GemmChooses(GetParam()); }
};
INSTANTIATE_TEST_SUITE_P(Kernels, AnyGemmAvx512Test,
                         ::testing::Values(Kernel::kFp32, Kernel::kBf16, Kernel::kAmx),
                         [](const auto& info) {
                           return info.param == Kernel::kFp32   ? "Fp32"
                                  : info.param == Kernel::kBf16 ? "Bf16"
                                                                : "Amx";
                         });

TEST_P(AnyGemmAvx512Test, MatchesDoubleReferenceAtEveryBlockingEdge) {
  const Kernel kernel = GetParam();
  const auto op = [kernel](float x) { return IsBf16(kernel) ? RoundToBf16(x) : x; };
  // 12 x 32 register block (AMX: 32 x 32 in 16 x 16 tiles of 16 k pairs), 16 lanes, K
  // blocks of kGemmKc = 256 (bf16: kSbgemmKc = 512), 192-row A blocks.
  const int64_t sizes[] = {1, 11, 12, 13, 16, 17, 31, 32, 33, 191, 193};
  const int64_t depths[] = {1, 15, 16, 17, 255, 256, 257, 511, 512, 513, 1040};
  uint64_t seed = 0;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      for (int64_t M : sizes) {
        for (int64_t N : sizes) {
          for (int64_t K : depths) {
            if ((M * N * K) % 7 != 0 && M > 17 && N > 17) continue;  // a spread, not all
            Operands o = MakeOperands(ta, tb, M, N, K, ++seed);
            const float alpha = seed % 2 ? 1.0f : -0.5f;
            const float beta = seed % 3 == 0 ? 0.0f : (seed % 3 == 1 ? 1.0f : 0.25f);
            const std::vector<float> before = o.C;
            Multiply(o, alpha, beta, kernel);
            for (int64_t i = 0; i < M; ++i) {
              for (int64_t j = 0; j < o.ldc; ++j) {
                const float got = o.C[i * o.ldc + j];
                if (j >= N) {  // the padding past each row of C is never written
                  ASSERT_EQ(got, before[i * o.ldc + j]) << Shape(o) << " wrote column " << j;
                  continue;
                }
                double sum = 0;
                for (int64_t k = 0; k < K; ++k) sum += double(op(OpA(o, i, k))) * op(OpB(o, k, j));
                const double want = alpha * sum + beta * double(before[i * o.ldc + j]);
                ASSERT_NEAR(got, want, 2e-6 * K + 1e-6)
                    << Shape(o) << " at (" << i << ", " << j << ")";
              }
            }
          }
        }
      }
    }
  }
}

// The header's promise, checked bitwise: per element, blocks of kGemmKc values of k are each
// summed from zero by fused multiply-adds in k order, scaled by alpha, and then the first is
// added to beta * C (fused) and every later one to C.
TEST_F(SgemmAvx512Test, SumsInTheDocumentedOrderBitForBit) {
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      Operands o = MakeOperands(ta, tb, 13, 35, 2 * kGemmKc + 19, ta + 2 * tb + 100);
      const std::vector<float> before = o.C;
      const float alpha = 0.75f, beta = -1.5f;
      Multiply(o, alpha, beta);
      for (int64_t i = 0; i < o.M; ++i) {
        for (int64_t j = 0; j < o.N; ++j) {
          float c = before[i * o.ldc + j];
          for (int64_t k0 = 0; k0 < o.K; k0 += kGemmKc) {
            float acc = 0;
            for (int64_t k = k0; k < std::min(o.K, k0 + kGemmKc); ++k)
              acc = std::fma(OpA(o, i, k), OpB(o, k, j), acc);
            c = std::fma(c, k0 == 0 ? beta : 1.0f, acc * alpha);
          }
          ASSERT_EQ(o.C[i * o.ldc + j], c) << Shape(o) << " at (" << i << ", " << j << ")";
        }
      }
    }
  }
}

TEST_P(AnyGemmAvx512Test, RowsDoNotDependOnTheCallsShape) {
  const Kernel kernel = GetParam();
  // One row computed alone, or at any position of a larger M, or in a narrower N: same
  // bits. Chunked training and prediction (any chunk size, any thread) rely on this.
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      Operands whole = MakeOperands(ta, tb, 203, 77, 300, 50 + ta + 2 * tb);
      Multiply(whole, 1.0f, 0.0f, kernel);
      // Rows at every place of a panel: AMX's second row of tiles (16-31) among them.
      for (int64_t row : {0, 11, 12, 16, 31, 47, 100, 191, 202}) {
        Operands single = whole;
        single.M = 1;
        single.C.assign(static_cast<size_t>(single.ldc), 0.0f);
        if (ta) {
          single.A.assign(whole.A.begin() + row, whole.A.end());  // column `row` starts here
        } else {
          single.A.assign(whole.A.begin() + row * whole.lda,
                          whole.A.begin() + (row + 1) * whole.lda);
        }
        Multiply(single, 1.0f, 0.0f, kernel);
        for (int64_t j = 0; j < whole.N; ++j)
          ASSERT_EQ(single.C[j], whole.C[row * whole.ldc + j]) << Shape(whole) << " row " << row;
      }
      Operands narrow = whole;
      narrow.N = 40;  // the first 40 columns only
      narrow.C.assign(narrow.C.size(), 0.0f);
      Multiply(narrow, 1.0f, 0.0f, kernel);
      for (int64_t i = 0; i < whole.M; ++i) {
        for (int64_t j = 0; j < narrow.N; ++j)
          ASSERT_EQ(narrow.C[i * narrow.ldc + j], whole.C[i * whole.ldc + j]) << Shape(whole);
      }
    }
  }
}

TEST_P(AnyGemmAvx512Test, BetaZeroOverwritesNaNInC) {
  Operands o = MakeOperands(false, true, 14, 33, 20, 77);
  o.C.assign(o.C.size(), std::numeric_limits<float>::quiet_NaN());
  Multiply(o, 1.0f, 0.0f, GetParam());
  for (int64_t i = 0; i < o.M; ++i) {
    for (int64_t j = 0; j < o.N; ++j) ASSERT_FALSE(std::isnan(o.C[i * o.ldc + j])) << i << "," << j;
  }
}

TEST_P(AnyGemmAvx512Test, GemmFloatUsesThisKernel) {
  // Gemm<float> dispatches here on this CPU: same bits as a direct call.
  if (GemmTakesAnother()) GTEST_SKIP() << "Gemm<float> takes AMX for bf16 on this CPU";
  Operands direct = MakeOperands(true, false, 40, 50, 60, 90);
  Operands through = direct;
  Multiply(direct, 1.0f, 0.0f, GetParam());
  Gemm<float>(true, false, 40, 50, 60, 1.0f, through.A.data(), through.lda, through.B.data(),
              through.ldb, 0.0f, through.C.data(), through.ldc, precision());
  EXPECT_EQ(direct.C, through.C);
}

// B packed once in a GemmPackCache and reused (a layer's weights times every chunk of a
// step): each call's C is bitwise the uncached call's, at shapes past every blocking edge
// (N over kNc = 2048 columns, K over the K block), with either transposition, beta 0 and 1,
// and several A's against one packed B; after Reset a changed B is packed again.
TEST_P(AnyGemmAvx512Test, PackedWeightsGiveTheUncachedBits) {
  if (GemmTakesAnother()) GTEST_SKIP() << "Gemm<float> takes AMX for bf16 on this CPU";
  const GemmPrecision precision = this->precision();
  GemmPackCache cache;
  uint64_t seed = 300;
  for (bool tb : {false, true}) {
    for (const auto& [N, K] : {std::pair<int64_t, int64_t>{77, 300}, {2100, 40}, {33, 1040}}) {
      Operands first = MakeOperands(false, tb, 29, N, K, seed++);
      for (int call = 0; call < 3; ++call) {
        Operands plain = MakeOperands(call % 2 == 1, tb, 13 + 50 * call, N, K, seed++);
        plain.B = first.B;  // the same weights every call
        Operands cached = plain;
        const float beta = call == 2 ? 1.0f : 0.0f;
        Gemm<float>(plain.ta, tb, plain.M, N, K, 1.0f, plain.A.data(), plain.lda, plain.B.data(),
                    plain.ldb, beta, plain.C.data(), plain.ldc, precision);
        Gemm<float>(cached.ta, tb, cached.M, N, K, 1.0f, cached.A.data(), cached.lda,
                    first.B.data(), cached.ldb, beta, cached.C.data(), cached.ldc, precision,
                    &cache);
        ASSERT_EQ(cached.C, plain.C) << Shape(plain) << " call " << call;
      }
    }
  }
  // The weights change (an update) and the cache is reset: the next call packs them anew.
  Operands o = MakeOperands(false, true, 20, 64, 48, 900);
  Operands stale = o;
  Gemm<float>(false, true, o.M, o.N, o.K, 1.0f, o.A.data(), o.lda, o.B.data(), o.ldb, 0.0f,
              o.C.data(), o.ldc, precision, &cache);
  for (float& w : o.B) w *= 2.0f;
  cache.Reset();
  Gemm<float>(false, true, o.M, o.N, o.K, 1.0f, o.A.data(), o.lda, o.B.data(), o.ldb, 0.0f,
              o.C.data(), o.ldc, precision, &cache);
  Gemm<float>(false, true, stale.M, stale.N, stale.K, 1.0f, stale.A.data(), stale.lda, o.B.data(),
              stale.ldb, 0.0f, stale.C.data(), stale.ldc, precision);
  EXPECT_EQ(o.C, stale.C) << "a reset cache multiplied the old weights";
}

// Packing writes every word the product reads: B packed into a buffer of NaN bit patterns
// (what a reused buffer may hold) gives the unpacked call's bits, at depths whose last K
// block ends inside a tile of 16 k pairs (AMX pads it with zeros) and past one K block.
TEST_P(AnyGemmAvx512Test, PackedWeightsIgnoreWhatTheirBufferHeldBefore) {
  if (GemmTakesAnother()) GTEST_SKIP() << "Gemm<float> takes AMX for bf16 on this CPU";
  const bool bf16 = IsBf16(GetParam());
  uint64_t seed = 700;
  for (const int64_t K : {1, 33, 40, 530}) {
    Operands plain = MakeOperands(false, true, 45, 70, K, seed++);
    Operands packed = plain;
    std::vector<uint32_t> buffer(static_cast<size_t>(PackedBAvx512Words(bf16, 70, K)) + 16,
                                 0xFFFFFFFFu);
    uint32_t* words = AlignedTo64(buffer.data());
    PackBAvx512(bf16, true, 70, K, packed.B.data(), packed.ldb, words);
    GemmAvx512PackedB(bf16, false, 45, 70, K, 1.0f, packed.A.data(), packed.lda, words, 0.0f,
                      packed.C.data(), packed.ldc);
    Gemm<float>(false, true, 45, 70, K, 1.0f, plain.A.data(), plain.lda, plain.B.data(), plain.ldb,
                0.0f, plain.C.data(), plain.ldc, precision());
    ASSERT_EQ(packed.C, plain.C) << Shape(plain);
  }
}

// Gemm<float>'s bf16 takes AMX exactly where the CPU offers its tiles, DLRM_MAX_ISA allows
// "amx" and Linux granted them (ctest runs this under DLRM_MAX_ISA=avx512 too, where it
// must not take them), and each product leaves the thread's tiles released.
TEST(SbgemmKernelChoice, AmxExactlyWhereOfferedAllowedAndGranted) {
  const bool allowed = ReadMaxIsa().level >= IsaLevel::kAmx;
  EXPECT_EQ(CpuHasAmxBf16(), allowed && CpuHasAvx512() && CpuOffersAmxBf16() &&
                                 CpuHasAvx512Bf16() && AmxTilesGranted());
  if (!CpuHasAmxBf16()) return;
  Operands o = MakeOperands(false, true, 40, 50, 60, 1);
  Multiply(o, 1.0f, 0.0f, Kernel::kAmx);
  EXPECT_EQ(StoredTilePalette(), 0) << "a product left its tiles configured";
}

// A bf16 product differs from the fp32 one by the operands' rounding (8 significant bits):
// close, not equal, and the same bits on every call.
TEST_P(AnyGemmAvx512Test, Bf16IsNearFp32AndRepeatsBitwise) {
  if (!IsBf16(GetParam())) GTEST_SKIP() << "for the bf16 kernels";
  Operands fp32 = MakeOperands(false, true, 64, 96, 512, 123);
  Operands bf16 = fp32, again = fp32;
  Multiply(fp32, 1.0f, 0.0f);
  Multiply(bf16, 1.0f, 0.0f, GetParam());
  Multiply(again, 1.0f, 0.0f, GetParam());
  EXPECT_EQ(bf16.C, again.C);
  double worst = 0;
  for (int64_t i = 0; i < fp32.M; ++i) {
    for (int64_t j = 0; j < fp32.N; ++j)
      worst =
          std::max(worst, std::abs(double(bf16.C[i * fp32.ldc + j]) - fp32.C[i * fp32.ldc + j]));
  }
  EXPECT_GT(worst, 0.0);  // it did round
  EXPECT_LT(worst, 0.1);  // 512 products of [-1, 1] values, each off by < 2^-8 relative
}

}  // namespace
}  // namespace dlrm

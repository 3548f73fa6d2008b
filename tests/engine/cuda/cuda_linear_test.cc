// The MLP layer on cuBLASLt (engine/cuda/linear.h) against the CPU's (engine/dense/linear.h)
// within fp32 rounding (TF32 and bf16 products within theirs), and bitwise run to run; and the
// run-time loading of cuBLASLt, which is tested everywhere (a CPU machine never needs the library,
// and when it is missing the error names every file tried).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "engine/core/philox.h"
#include "engine/core/status.h"
#include "engine/cuda/cublas_lt.h"
#include "engine/cuda/linear.h"
#include "engine/dense/linear.h"
#include "tests/support/cuda_support.h"

namespace dlrm::cuda {
namespace {

using testing::DeviceCopy;
using ::testing::HasSubstr;

TEST(CublasLtLoadTest, AMissingLibraryIsNamedWithTheLoadersReason) {
  try {
    OpenCublasLt({"libcublasLt-not-here.so.99"});
    ADD_FAILURE() << "opened a library that does not exist";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), StatusCode::kFailedPrecondition);
    EXPECT_THAT(e.what(), HasSubstr("libcublasLt-not-here.so.99: "));
    EXPECT_THAT(e.what(), HasSubstr("LD_LIBRARY_PATH"));
  }
}

// Where the toolkit is installed (CI has it) the library opens and resolves every entry
// point without a GPU or a driver; elsewhere the error names what was tried.
TEST(CublasLtLoadTest, TheToolkitsLibraryOpensOrIsNamed) {
  try {
    const CublasLtApi& api = CublasLt();
    EXPECT_GE(api.GetVersion(), static_cast<size_t>(CUBLAS_VER_MAJOR) * 10000);
    EXPECT_THAT(api.path, HasSubstr("libcublasLt.so."));
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), StatusCode::kFailedPrecondition);
    EXPECT_THAT(e.what(), HasSubstr(CublasLtCandidates()[0]));
  }
}

struct Case {
  int64_t n;
  int in, out;
  bool relu;
};

struct Result {
  std::vector<float> y, dy, dx, dW, db;
};

Result RunOnDevice(const Case& c, const std::vector<float>& x, const std::vector<float>& W,
                   const std::vector<float>& b, const std::vector<float>& dy,
                   MatmulPrecision precision = MatmulPrecision::kHighest, int rank = 0) {
  const DeviceActivation act = c.relu ? DeviceActivation::kRelu : DeviceActivation::kNone;
  DeviceCopy<float> d_x(x), d_W(W), d_b(b), d_dy(dy);
  DeviceCopy<float> d_y(std::vector<float>(c.n * c.out)), d_dx(std::vector<float>(c.n * c.in));
  DeviceCopy<float> d_dW(std::vector<float>(W.size())), d_db(std::vector<float>(b.size()));
  LinearContext ctx(nullptr, precision, rank);
  ctx.Forward(d_x.get(), c.n, c.in, c.out, d_W.get(), d_b.get(), act, d_y.get());
  ctx.Backward(d_x.get(), d_y.get(), d_dy.get(), c.n, c.in, c.out, d_W.get(), act, d_dx.get(),
               d_dW.get(), d_db.get());
  CheckCuda(cudaStreamSynchronize(nullptr), "cudaStreamSynchronize");
  return {d_y.ToHost(), d_dy.ToHost(), d_dx.ToHost(), d_dW.ToHost(), d_db.ToHost()};
}

TEST(CudaLinearTest, MatchesTheCpuLayerAndRepeatsBitwise) {
  SKIP_WITHOUT_GPU();
  OpenDevice(0);
  // More than one bias chunk (256 rows), a one-wide output, dims not multiples of 4.
  for (const Case c : {Case{300, 13, 64, true}, Case{1, 7, 1, false}, Case{513, 64, 31, true}}) {
    const std::vector<float> x = testing::RandomFloats(c.n * c.in, 1),
                             W = testing::RandomFloats(c.out * c.in, 2),
                             b = testing::RandomFloats(c.out, 3),
                             dy0 = testing::RandomFloats(c.n * c.out, 4);
    Result cpu{std::vector<float>(c.n * c.out), dy0, std::vector<float>(c.n * c.in),
               std::vector<float>(W.size()), std::vector<float>(b.size())};
    const Activation act = c.relu ? Activation::kRelu : Activation::kNone;
    LinearForward(x.data(), c.n, c.in, c.out, W.data(), b.data(), act, cpu.y.data());
    LinearBackward(x.data(), cpu.y.data(), cpu.dy.data(), c.n, c.in, c.out, W.data(), act,
                   cpu.dx.data(), cpu.dW.data(), cpu.db.data());
    const Result gpu = RunOnDevice(c, x, W, b, dy0);
    testing::ExpectAllNear(gpu.y, cpu.y, 1e-5f, "y");
    testing::ExpectAllNear(gpu.dy, cpu.dy, 1e-5f, "dy");
    testing::ExpectAllNear(gpu.dx, cpu.dx, 1e-5f, "dx");
    testing::ExpectAllNear(gpu.dW, cpu.dW, 1e-5f, "dW");
    testing::ExpectAllNear(gpu.db, cpu.db, 1e-5f, "db");
    const Result again = RunOnDevice(c, x, W, b, dy0);
    for (const auto& [a, b2] : {std::pair{&gpu.y, &again.y}, std::pair{&gpu.dx, &again.dx},
                                std::pair{&gpu.dW, &again.dW}, std::pair{&gpu.db, &again.db}})
      EXPECT_EQ(std::memcmp(a->data(), b2->data(), a->size() * sizeof(float)), 0);
  }
}

// The layer's operands `shift` floats past a 16-byte boundary (a parameter vector's later
// layers start anywhere), run by `ctx` (which may have chosen algorithms for another shift).
Result RunShifted(LinearContext& ctx, const Case& c, int shift, const std::vector<float>& x,
                  const std::vector<float>& W, const std::vector<float>& b,
                  const std::vector<float>& dy) {
  const auto shifted = [&](const std::vector<float>& v) {
    std::vector<float> padded(static_cast<size_t>(shift), 0.f);
    padded.insert(padded.end(), v.begin(), v.end());
    return std::make_unique<DeviceCopy<float>>(padded);
  };
  const auto zeros = [&](size_t n) { return shifted(std::vector<float>(n)); };
  auto d_x = shifted(x), d_W = shifted(W), d_b = shifted(b), d_dy = shifted(dy);
  auto d_y = zeros(c.n * c.out), d_dx = zeros(c.n * c.in), d_dW = zeros(W.size()),
       d_db = zeros(b.size());
  const auto at = [&](const std::unique_ptr<DeviceCopy<float>>& d) { return d->get() + shift; };
  const DeviceActivation act = c.relu ? DeviceActivation::kRelu : DeviceActivation::kNone;
  ctx.Forward(at(d_x), c.n, c.in, c.out, at(d_W), at(d_b), act, at(d_y));
  ctx.Backward(at(d_x), at(d_y), at(d_dy), c.n, c.in, c.out, at(d_W), act, at(d_dx), at(d_dW),
               at(d_db));
  CheckCuda(cudaStreamSynchronize(nullptr), "cudaStreamSynchronize");
  const auto host = [&](const std::unique_ptr<DeviceCopy<float>>& d) {
    std::vector<float> v = d->ToHost();
    return std::vector<float>(v.begin() + shift, v.end());
  };
  return {host(d_y), host(d_dy), host(d_dx), host(d_dW), host(d_db)};
}

// cuBLASLt's algorithm for a shape is chosen knowing its operands' alignment: one context
// runs a layer 16-byte aligned, then 4 and 8 bytes past that, and gets the same values
// within rounding each time (an algorithm kept for the aligned shape may refuse the rest).
TEST(CudaLinearTest, OperandsAnywhereInMemoryRun) {
  SKIP_WITHOUT_GPU();
  OpenDevice(0);
  const Case c{300, 64, 128, true};
  const std::vector<float> x = testing::RandomFloats(c.n * c.in, 1),
                           W = testing::RandomFloats(c.out * c.in, 2),
                           b = testing::RandomFloats(c.out, 3),
                           dy0 = testing::RandomFloats(c.n * c.out, 4);
  LinearContext ctx(nullptr);
  const Result aligned = RunShifted(ctx, c, 0, x, W, b, dy0);
  for (const int shift : {1, 2, 0}) {
    const Result got = RunShifted(ctx, c, shift, x, W, b, dy0);
    testing::ExpectAllNear(got.y, aligned.y, 1e-5f, "y");
    testing::ExpectAllNear(got.dx, aligned.dx, 1e-5f, "dx");
    testing::ExpectAllNear(got.dW, aligned.dW, 1e-5f, "dW");
    testing::ExpectAllNear(got.db, aligned.db, 1e-5f, "db");
  }
}

// ||got - want|| / ||want||.
double RelativeError(const std::vector<float>& got, const std::vector<float>& want) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    diff += (static_cast<double>(got[i]) - want[i]) * (static_cast<double>(got[i]) - want[i]);
    norm += static_cast<double>(want[i]) * want[i];
  }
  return std::sqrt(diff / norm);
}

// TF32 and bf16 products on the tensor cores: within their operands' rounding of the fp32
// layer (fresh random inputs, a shape of several tiles), and bitwise run to run.
TEST(CudaLinearTest, ReducedPrecisionIsWithinItsRoundingAndRepeatsBitwise) {
  SKIP_WITHOUT_GPU();
  OpenDevice(0);
  // No ReLU: its mask would follow the rounding of values near zero, which is no product's error.
  const Case c{1000, 256, 192, false};
  const std::vector<float> x = testing::RandomFloats(c.n * c.in, 21),
                           W = testing::RandomFloats(c.out * c.in, 22),
                           b = testing::RandomFloats(c.out, 23),
                           dy0 = testing::RandomFloats(c.n * c.out, 24);
  const Result fp32 = RunOnDevice(c, x, W, b, dy0);
  for (const auto& [precision, bound] :
       {std::pair{MatmulPrecision::kHigh, 3e-3}, std::pair{MatmulPrecision::kMedium, 2e-2}}) {
    SCOPED_TRACE(precision == MatmulPrecision::kHigh ? "TF32" : "bf16");
    const Result got = RunOnDevice(c, x, W, b, dy0, precision);
    EXPECT_LT(RelativeError(got.y, fp32.y), bound);
    EXPECT_LT(RelativeError(got.dx, fp32.dx), bound);
    EXPECT_LT(RelativeError(got.dW, fp32.dW), bound);
    EXPECT_GT(RelativeError(got.y, fp32.y), 0.0);  // the tensor cores did the products
    const Result again = RunOnDevice(c, x, W, b, dy0, precision);
    EXPECT_EQ(std::memcmp(got.y.data(), again.y.data(), got.y.size() * sizeof(float)), 0);
    EXPECT_EQ(std::memcmp(got.dW.data(), again.dW.data(), got.dW.size() * sizeof(float)), 0);
  }
}

// The heuristic's other candidates (what cuda_linear_bench times): each gives the first
// one's values within fp32 rounding and repeats bitwise, a rank past the candidates is
// kNotFound naming their count, and a rank outside [0, 64) is refused when the context is
// made.
TEST(CudaLinearTest, EveryAlgorithmRankIsWithinRoundingAndRepeatsBitwise) {
  SKIP_WITHOUT_GPU();
  OpenDevice(0);
  const Case c{1000, 256, 192, false};  // a ReLU's mask would follow the rounding near zero
  const std::vector<float> x = testing::RandomFloats(c.n * c.in, 31),
                           W = testing::RandomFloats(c.out * c.in, 32),
                           b = testing::RandomFloats(c.out, 33),
                           dy0 = testing::RandomFloats(c.n * c.out, 34);
  const Result first = RunOnDevice(c, x, W, b, dy0);
  int ranks = 1;
  for (int rank = 1; rank < 64; ++rank, ++ranks) {
    SCOPED_TRACE(rank);
    try {
      const Result got = RunOnDevice(c, x, W, b, dy0, MatmulPrecision::kHighest, rank);
      testing::ExpectAllNear(got.y, first.y, 1e-4f, "y");
      testing::ExpectAllNear(got.dx, first.dx, 1e-4f, "dx");
      testing::ExpectAllNear(got.dW, first.dW, 1e-3f, "dW");
      const Result again = RunOnDevice(c, x, W, b, dy0, MatmulPrecision::kHighest, rank);
      EXPECT_EQ(std::memcmp(got.dW.data(), again.dW.data(), got.dW.size() * sizeof(float)), 0);
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), StatusCode::kNotFound);
      EXPECT_THAT(e.what(), HasSubstr("algorithms for a"));
      break;
    }
  }
  EXPECT_GT(ranks, 1) << "cuBLASLt offered one algorithm for every shape";
  try {
    LinearContext ctx(nullptr, MatmulPrecision::kHighest, 64);
    ADD_FAILURE() << "took an algorithm rank of 64";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(e.what(), HasSubstr("algorithm_rank"));
  }
}

TEST(CudaLinearTest, BadSizesAreRefusedNamingThem) {
  SKIP_WITHOUT_GPU();  // the context opens cuBLASLt and allocates its workspace
  OpenDevice(0);
  LinearContext ctx(nullptr);
  try {
    ctx.Forward(nullptr, 0, 3, 4, nullptr, nullptr, DeviceActivation::kNone, nullptr);
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(e.what(), HasSubstr("n=0"));
  }
}

}  // namespace
}  // namespace dlrm::cuda

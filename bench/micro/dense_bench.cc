// Dense kernels of the reference models, single-threaded as the engine runs them (one
// chunk per pool thread, BLAS single-threaded):
//  BM_LinearForward / BM_LinearBackward: every Linear layer of both MLPs, at the engine's
//    chunk size (reduction_chunk_rows: what each task computes) and at the full batch
//    (what a GEMM of the whole batch would achieve; the gap is the cost of chunking).
//    Both include the fused bias + activation sweep. Backward computes dW, db and dx,
//    except for the bottom MLP's first layer, whose dx the model never needs.
//  BM_BiasReluForward / BM_ReluBackwardBiasGrad: that sweep alone (bias + ReLU; ReLU mask
//    + bias gradient), at the chunk size only (elementwise: a larger batch only repeats
//    it). Inputs have random signs, as pre-activations do, which a branchy loop pays for.
//  BM_DotInteractionForward / BM_DotInteractionBackward: the DOT interaction.
//  BM_Gemm/{fp32,bf16,bf16_amx,bf16_avx512}[/tn]/MxNxK: Gemm<float> alone (x W^T, as a
//    Linear forward; tn: dY^T X, a weight gradient) in each precision, at MLPerf DCNv2's
//    top-MLP and cross-layer shapes on the engine's 512-row chunks; bf16 only where the CPU
//    has AVX512-BF16 (issue 16, acceptance 4: its FLOP/s against fp32's), named bf16_amx
//    where Gemm<float> takes AMX, which then also runs bf16_avx512, the AVX512-BF16 kernel.
// A FLOP/s counter gives GEMM efficiency; bytes are the operands read and written once.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "bench/micro/micro_bench.h"
#include "engine/core/cpu_features.h"
#include "engine/dense/gemm.h"
#include "engine/dense/interaction.h"
#include "engine/dense/linear.h"
#include "engine/dense/sgemm_avx512.h"

namespace dlrm::bench {
namespace {

constexpr int64_t kFloat = sizeof(float);

std::vector<float> Pattern(int64_t count, float scale, uint64_t salt) {
  std::vector<float> values(static_cast<size_t>(count));
  FillPattern(values.data(), count, scale, salt);
  return values;
}

void SetRates(benchmark::State& state, int64_t rows, int64_t bytes, int64_t flops) {
  const auto iters = static_cast<int64_t>(state.iterations());
  state.SetItemsProcessed(iters * rows);
  state.SetBytesProcessed(iters * bytes);
  if (flops > 0) {
    state.counters["FLOP/s"] =
        benchmark::Counter(static_cast<double>(iters * flops), benchmark::Counter::kIsRate);
  }
}

void LinearFwd(benchmark::State& state, int in, int out, int64_t n, Activation act) {
  const auto x = Pattern(n * in, 1.0f, 1), W = Pattern(int64_t{out} * in, 0.05f, 2),
             b = Pattern(out, 0.05f, 3);
  std::vector<float> y(static_cast<size_t>(n * out));
  for (auto _ : state) {
    LinearForward(x.data(), n, in, out, W.data(), b.data(), act, y.data());
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  SetRates(state, n, kFloat * (n * in + int64_t{in} * out + out + n * out), 2 * n * in * out);
}

void LinearBwd(benchmark::State& state, int in, int out, int64_t n, Activation act, bool need_dx) {
  const auto x = Pattern(n * in, 1.0f, 4), grad = Pattern(n * out, 1e-3f, 5),
             W = Pattern(int64_t{out} * in, 0.05f, 6);
  // The layer's output, for the ReLU mask: about half of it zero.
  auto y = Pattern(n * out, 1.0f, 15);
  const std::vector<float> zero_bias(static_cast<size_t>(out), 0.0f);
  BiasActivationForward(y.data(), zero_bias.data(), n, out, Activation::kRelu);
  std::vector<float> dy(grad.size());
  std::vector<float> dx(need_dx ? static_cast<size_t>(n * in) : 0),
      dW(static_cast<size_t>(out) * in), db(static_cast<size_t>(out));
  for (auto _ : state) {
    // The backward masks dy in place; restoring it is part of each iteration.
    std::copy(grad.begin(), grad.end(), dy.begin());
    LinearBackward(x.data(), y.data(), dy.data(), n, in, out, W.data(), act,
                   need_dx ? dx.data() : nullptr, dW.data(), db.data());
    benchmark::DoNotOptimize(dW.data());
    benchmark::ClobberMemory();
  }
  const int64_t gemm = 2 * n * in * out;
  const int64_t bytes = kFloat * (n * in + n * out + int64_t{in} * out + out +
                                  (need_dx ? int64_t{in} * out + n * in : 0));
  SetRates(state, n, bytes, gemm * (need_dx ? 2 : 1) + n * out);
}

void BiasReluFwd(benchmark::State& state, int64_t n, int out) {
  const auto pre = Pattern(n * out, 1.0f, 12), b = Pattern(out, 0.05f, 16);
  std::vector<float> y(pre.size());
  for (auto _ : state) {
    // Restoring the pre-activations is part of each iteration (the sweep works in place);
    // the copy costs a small fraction of the time and is not counted in the bytes.
    std::copy(pre.begin(), pre.end(), y.begin());
    BiasActivationForward(y.data(), b.data(), n, out, Activation::kRelu);
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  SetRates(state, n * out, kFloat * 2 * n * out, 0);  // items: elements
}

void ReluBwdBiasGrad(benchmark::State& state, int64_t n, int out) {
  auto y = Pattern(n * out, 1.0f, 13);
  const std::vector<float> zero_bias(static_cast<size_t>(out), 0.0f);
  BiasActivationForward(y.data(), zero_bias.data(), n, out, Activation::kRelu);  // half zero
  const auto grad = Pattern(n * out, 1e-3f, 14);
  std::vector<float> dy(grad.size()), db(static_cast<size_t>(out));
  for (auto _ : state) {
    std::copy(grad.begin(), grad.end(), dy.begin());
    ActivationBackwardBiasGrad(y.data(), dy.data(), n, out, Activation::kRelu, db.data());
    benchmark::DoNotOptimize(dy.data());
    benchmark::ClobberMemory();
  }
  SetRates(state, n * out, kFloat * 3 * n * out, 0);  // items: elements
}

void DotFwd(benchmark::State& state, const Interaction<float>* inter, int d, int64_t n) {
  const int width = inter->pooled_width();
  const auto x = Pattern(n * d, 0.1f, 7), pooled = Pattern(n * width, 0.1f, 8);
  std::vector<float> out(static_cast<size_t>(n * inter->out_dim()));
  for (auto _ : state) {
    inter->Forward(x.data(), pooled.data(), n, out.data());
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  const int64_t features = width / d + 1, pairs = features * (features - 1) / 2;
  SetRates(state, n, kFloat * n * (d + width + inter->out_dim()), 2 * n * pairs * d);
}

void DotBwd(benchmark::State& state, const Interaction<float>* inter, int d, int64_t n) {
  const int width = inter->pooled_width();
  const auto x = Pattern(n * d, 0.1f, 9), pooled = Pattern(n * width, 0.1f, 10),
             dout = Pattern(n * inter->out_dim(), 1e-3f, 11);
  std::vector<float> dx(static_cast<size_t>(n * d)), dpooled(static_cast<size_t>(n * width));
  for (auto _ : state) {
    inter->Backward(x.data(), pooled.data(), dout.data(), n, dx.data(), dpooled.data());
    benchmark::DoNotOptimize(dpooled.data());
    benchmark::ClobberMemory();
  }
  const int64_t features = width / d + 1, pairs = features * (features - 1) / 2;
  SetRates(state, n, kFloat * n * (2 * (d + width) + inter->out_dim()), 4 * n * pairs * d);
}

// What BM_Gemm multiplies with: Gemm<float> in a precision (bf16: AMX where the CPU has
// it), or, where it has AMX, the AVX512-BF16 kernel it replaced, called directly.
enum class GemmPath { kFp32, kBf16, kBf16Avx512 };

const char* GemmPathName(GemmPath path) {
  switch (path) {
    case GemmPath::kFp32: return "fp32";
    case GemmPath::kBf16: return CpuHasAmxBf16() ? "bf16_amx" : "bf16";
    case GemmPath::kBf16Avx512: break;
  }
  return "bf16_avx512";
}

// trans_a: C = A^T B (a Linear layer's weight gradient, dY^T X), else C = A B^T.
void GemmOnly(benchmark::State& state, bool trans_a, int64_t M, int64_t N, int64_t K,
              GemmPath path) {
  const auto a = Pattern(M * K, 1.0f, 17), b = Pattern(N * K, 0.05f, 18);
  std::vector<float> c(static_cast<size_t>(M * N));
  const int64_t lda = trans_a ? M : K, ldb = trans_a ? N : K;
  const GemmPrecision precision =
      path == GemmPath::kFp32 ? GemmPrecision::kFp32 : GemmPrecision::kBf16;
  for (auto _ : state) {
    if (path == GemmPath::kBf16Avx512)
      SbgemmAvx512(trans_a, !trans_a, M, N, K, 1.0f, a.data(), lda, b.data(), ldb, 0.0f, c.data(),
                   N);
    else
      Gemm<float>(trans_a, !trans_a, M, N, K, 1.0f, a.data(), lda, b.data(), ldb, 0.0f, c.data(), N,
                  precision);
    benchmark::DoNotOptimize(c.data());
    benchmark::ClobberMemory();
  }
  SetRates(state, M, kFloat * (M * K + N * K + M * N), 2 * M * N * K);
}

void RegisterGemms() {
  // {trans_a, M, N, K}: the top MLP's and the cross layers' forwards (x W^T; 3456 = 27 x
  // 128 is the interaction's width), then the weight gradients of the widest ones.
  const int64_t shapes[][4] = {{0, 512, 1024, 1024}, {0, 512, 512, 1024},  {0, 512, 1024, 512},
                               {0, 512, 512, 256},   {0, 512, 1024, 3456}, {0, 512, 512, 3456},
                               {0, 512, 3456, 512},  {1, 1024, 3456, 512}, {1, 512, 3456, 512}};
  for (const GemmPath path : {GemmPath::kFp32, GemmPath::kBf16, GemmPath::kBf16Avx512}) {
    // Gemm<float> refuses bf16 (an internal check) where Linux refused AMX's tiles.
    if (path == GemmPath::kBf16 && (!CpuHasAvx512Bf16() || AmxBf16Refused())) continue;
    if (path == GemmPath::kBf16Avx512 && !CpuHasAmxBf16()) continue;
    for (const auto& [trans_a, M, N, K] : shapes) {
      const std::string name = std::string("BM_Gemm/") + GemmPathName(path) + "/" +
                               (trans_a != 0 ? "tn/" : "") + std::to_string(M) + "x" +
                               std::to_string(N) + "x" + std::to_string(K);
      benchmark::RegisterBenchmark(name.c_str(), GemmOnly, trans_a != 0, M, N, K, path)
          ->UseRealTime();
    }
  }
}

// sizes: {chunk rows, batch size}.
void RegisterMlp(const std::string& prefix, int in, const config::MlpConfig& mlp, bool relu_last,
                 const std::vector<int64_t>& sizes) {
  for (int l = 0; l < mlp.layer_sizes_size(); ++l) {
    const int out = mlp.layer_sizes(l);
    const std::string layer =
        prefix + "." + std::to_string(l) + "/" + std::to_string(in) + "x" + std::to_string(out);
    const bool need_dx = !(prefix.find("bottom") != std::string::npos && l == 0);
    const Activation act =
        relu_last || l + 1 < mlp.layer_sizes_size() ? Activation::kRelu : Activation::kNone;
    if (act == Activation::kRelu) {
      const std::string suffix = prefix + "." + std::to_string(l) + "/" + std::to_string(out) +
                                 "/n:" + std::to_string(sizes[0]);
      benchmark::RegisterBenchmark(("BM_BiasReluForward/" + suffix).c_str(), BiasReluFwd, sizes[0],
                                   out)
          ->UseRealTime();
      benchmark::RegisterBenchmark(("BM_ReluBackwardBiasGrad/" + suffix).c_str(), ReluBwdBiasGrad,
                                   sizes[0], out)
          ->UseRealTime();
    }
    for (const int64_t n : sizes) {
      const std::string suffix = layer + "/n:" + std::to_string(n);
      benchmark::RegisterBenchmark(("BM_LinearForward/" + suffix).c_str(), LinearFwd, in, out, n,
                                   act)
          ->UseRealTime();
      benchmark::RegisterBenchmark(("BM_LinearBackward/" + suffix).c_str(), LinearBwd, in, out, n,
                                   act, need_dx)
          ->UseRealTime();
    }
    in = out;
  }
}

}  // namespace

void RegisterDenseBenchmarks(const std::vector<ReferenceModel>& models) {
  RegisterGemms();
  for (const ReferenceModel& ref : models) {
    const config::ModelConfig& model = ref.config.model();
    const std::vector<int64_t> sizes = {ref.config.reduction_chunk_rows(), ref.batch_size};
    const config::MlpConfig& bottom = model.bottom_mlp();
    const int d = bottom.layer_sizes(bottom.layer_sizes_size() - 1);
    const int num_features = model.sparse_features_size();
    // Owned by the benchmarks that capture it.
    auto inter = std::make_shared<Interaction<float>>(config::ModelConfig::DOT, d,
                                                      std::vector<int>(num_features, d));
    // As DlrmModel: ReLU after every layer but the top MLP's last (the logit).
    RegisterMlp(ref.name + "/bottom", model.num_dense_features(), bottom, true, sizes);
    RegisterMlp(ref.name + "/top", inter->out_dim(), model.top_mlp(), false, sizes);
    for (const int64_t n : sizes) {
      const std::string suffix = ref.name + "/d:" + std::to_string(d) +
                                 "/F:" + std::to_string(num_features) + "/n:" + std::to_string(n);
      benchmark::RegisterBenchmark(
          ("BM_DotInteractionForward/" + suffix).c_str(),
          [inter, d, n](benchmark::State& s) { DotFwd(s, inter.get(), d, n); })
          ->UseRealTime();
      benchmark::RegisterBenchmark(
          ("BM_DotInteractionBackward/" + suffix).c_str(),
          [inter, d, n](benchmark::State& s) { DotBwd(s, inter.get(), d, n); })
          ->UseRealTime();
    }
  }
}

}  // namespace dlrm::bench

// The MLP's GEMMs on the device (engine/cuda/linear.h) for `multihot`'s top MLP, its
// first layer's input as DOT gives it (415 = 64 + 26 * 27 / 2 columns) and padded to a
// multiple of 4 (416), at each matmul precision: what rows that are only 4-byte aligned
// (cuBLASLt is told, and picks kernels without vectorized loads) cost, i.e. what the
// engine's padded interaction output buys (engine/cuda/dense_network.h, as HugeCTR pads;
// DESIGN.md, "The floor, and what 3x needs").
//
//   cuda_linear_bench [--batch_size 8192 --widths 415,416 --layers 1024,1024,512,256,1
//                      --algorithms 8]
//
// For each width and precision: the whole MLP's forward (GEMM, bias and ReLU epilogue)
// and backward (dx, dW, db), each the median of --reps passes timed with device events,
// and the TFLOP/s of its multiply-adds. A performance figure, not a test: it asserts
// nothing (cuda_linear_test checks the results).
//
// Then, at the last width, each layer at each of cuBLASLt's first --algorithms
// candidates (LinearContext's algorithm_rank; rank 0 is the engine's choice), and the sums
// of rank 0 and of each layer's fastest: what choosing the algorithm by timing would buy.
//
// Before the MLP, the DOT interaction that feeds it (engine/cuda/interaction.h) at
// --dot_features pooled vectors of --dot_dim, its rows as wide as its output and padded
// to a multiple of 4 as the engine lays them: forward and backward, each with the
// bandwidth its reads and writes would take at that time (what the kernel cannot do
// without; cuda_interaction_test checks the results).
#include <cuda_runtime.h>
#include <gflags/gflags.h>

#include <cstdint>
#include <cstdio>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "bench/cuda/device_timing.h"
#include "engine/core/status.h"
#include "engine/cuda/device.h"
#include "engine/cuda/device_buffer.h"
#include "engine/cuda/interaction.h"
#include "engine/cuda/linear.h"

DEFINE_int64(batch_size, 8192, "rows of every GEMM");
DEFINE_string(widths, "415,416", "input widths of the first layer, comma-separated");
DEFINE_string(layers, "1024,1024,512,256,1", "output widths of the layers, comma-separated");
DEFINE_int32(reps, 20, "timed passes (median reported)");
DEFINE_int32(dot_dim, 64, "DOT's vector width (the bottom MLP's output, each table's dim)");
DEFINE_int32(dot_features, 26, "DOT's pooled vectors (0: no DOT timing)");
DEFINE_int32(algorithms, 8,
             "cuBLASLt candidates timed per layer at the last width (0: none; at most 64)");

namespace dlrm::cuda {
namespace {

// `flag`'s comma-separated positive integers; kInvalidArgument naming the flag otherwise.
std::vector<int> ParseWidths(const std::string& flag, const std::string& text) {
  std::vector<int> widths;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    size_t used = 0;
    int w = 0;
    try {
      w = std::stoi(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != item.size() || w < 1 || w > (1 << 16))
      ThrowInvalid("--", flag, ": \"", item, "\" is not a width in [1, 65536]");
    widths.push_back(w);
  }
  if (widths.empty()) ThrowInvalid("--", flag, " is empty");
  return widths;
}

// One layer's parameters, activations and gradients, random where they are read first.
struct Layer {
  int in = 0, out = 0;
  DeviceBuffer<float> W, b, y, dy, dx, dW, db;
  Layer(int64_t n, int in_width, int out_width) : in(in_width), out(out_width) {
    const auto rows = static_cast<size_t>(n);
    for (auto [buffer, count] : {std::pair{&W, size_t(out) * in},
                                 {&b, size_t(out)},
                                 {&y, rows * out},
                                 {&dy, rows * out},
                                 {&dx, rows * in},
                                 {&dW, size_t(out) * in},
                                 {&db, size_t(out)}})
      buffer->Resize(count);
    FillRandom(W.get(), W.size(), 1);
    FillRandom(b.get(), b.size(), 2);
    FillRandom(dy.get(), dy.size(), 3);
  }
};

// The MLP's input [batch_size x width] and layers of widths `outs` (ReLU but the last).
struct Mlp {
  int64_t n = FLAGS_batch_size;
  DeviceBuffer<float> x;
  std::vector<std::unique_ptr<Layer>> layers;
  double macs = 0;  // multiply-adds of the forward

  Mlp(int width, const std::vector<int>& outs) : x(static_cast<size_t>(FLAGS_batch_size) * width) {
    FillRandom(x.get(), x.size(), 4);
    int in = width;
    for (const int out : outs) {
      layers.push_back(std::make_unique<Layer>(n, in, out));
      macs += static_cast<double>(n) * in * out;
      in = out;
    }
  }
  DeviceActivation act(size_t l) const {
    return l + 1 < layers.size() ? DeviceActivation::kRelu : DeviceActivation::kNone;
  }
  const float* input(size_t l) const { return l == 0 ? x.get() : layers[l - 1]->y.get(); }
  void Forward(LinearContext& context, size_t l) {
    Layer& L = *layers[l];
    context.Forward(input(l), n, L.in, L.out, L.W.get(), L.b.get(), act(l), L.y.get());
  }
  void Backward(LinearContext& context, size_t l) {
    Layer& L = *layers[l];
    context.Backward(input(l), L.y.get(), L.dy.get(), n, L.in, L.out, L.W.get(), act(l), L.dx.get(),
                     L.dW.get(), L.db.get());
  }
};

void TimeMlp(const char* name, MatmulPrecision precision, int width, const std::vector<int>& outs) {
  const Stream stream;
  LinearContext context(stream, precision);
  Mlp mlp(width, outs);
  const double forward = MedianMs(FLAGS_reps, stream, [&](int) {
    for (size_t l = 0; l < mlp.layers.size(); ++l) mlp.Forward(context, l);
  });
  const double backward = MedianMs(FLAGS_reps, stream, [&](int) {
    for (size_t l = mlp.layers.size(); l-- > 0;) mlp.Backward(context, l);
  });
  std::printf("mlp %4d-%s %-8s forward %.3f ms (%.1f TFLOP/s), backward %.3f ms (%.1f TFLOP/s)\n",
              width, FLAGS_layers.c_str(), name, forward, 2 * mlp.macs / (forward * 1e9), backward,
              4 * mlp.macs / (backward * 1e9));
}

// Milliseconds of fn (a layer's pass at one algorithm rank), or -1 where cuBLASLt has no
// candidate of that rank for one of its shapes.
template <typename Fn>
double MsOrNone(cudaStream_t stream, Fn fn) {
  try {
    return MedianMs(FLAGS_reps, stream, [&](int) { fn(); });
  } catch (const Error& e) {
    if (e.code() != StatusCode::kNotFound) throw;
    return -1;
  }
}

// Per layer, its forward and backward at each of the heuristic's first --algorithms
// candidates: what a choice other than the heuristic's first would buy (each candidate
// is deterministic: the reduction schemes with atomics are excluded from all of them).
void TimeAlgorithms(const char* name, MatmulPrecision precision, int width,
                    const std::vector<int>& outs) {
  const Stream stream;
  Mlp mlp(width, outs);
  std::vector<std::unique_ptr<LinearContext>> contexts;
  for (int r = 0; r < FLAGS_algorithms; ++r)
    contexts.push_back(std::make_unique<LinearContext>(stream, precision, r));
  double first[2] = {0, 0}, best[2] = {0, 0};
  for (size_t l = 0; l < mlp.layers.size(); ++l) {
    std::printf("algos %-8s layer %zu (%d -> %d), ms by rank:", name, l, mlp.layers[l]->in,
                mlp.layers[l]->out);
    double layer_best[2] = {-1, -1};
    for (const auto& context : contexts) {
      const double ms[2] = {MsOrNone(stream, [&] { mlp.Forward(*context, l); }),
                            MsOrNone(stream, [&] { mlp.Backward(*context, l); })};
      std::printf(" %.3f/%.3f", ms[0], ms[1]);
      for (int p = 0; p < 2; ++p)
        if (ms[p] >= 0 && (layer_best[p] < 0 || ms[p] < layer_best[p])) layer_best[p] = ms[p];
      if (context == contexts.front()) first[0] += ms[0], first[1] += ms[1];
    }
    std::printf("\n");
    best[0] += layer_best[0], best[1] += layer_best[1];
  }
  std::printf(
      "algos %-8s %d-%s: forward %.3f ms at rank 0, %.3f at each layer's best; backward %.3f, "
      "%.3f\n",
      name, width, FLAGS_layers.c_str(), first[0], best[0], first[1], best[1]);
}

// DOT over --dot_features vectors of --dot_dim and x, rows `stride` floats apart.
void TimeDot(int stride) {
  const Stream stream;
  const int d = FLAGS_dot_dim, f = FLAGS_dot_features;
  const InteractionShape shape{true, d, f, f * d, false, stride};
  const int64_t n = FLAGS_batch_size;
  const auto rows = static_cast<size_t>(n);
  DeviceBuffer<float> x(rows * d), pooled(rows * f * d), out(rows * shape.row_stride()),
      dout(rows * shape.row_stride()), dx(rows * d), dpooled(rows * f * d);
  FillRandom(x.get(), x.size(), 5);
  FillRandom(pooled.get(), pooled.size(), 6);
  FillRandom(dout.get(), dout.size(), 7);
  const double forward = MedianMs(FLAGS_reps, stream, [&](int) {
    LaunchInteractionForward(shape, x.get(), pooled.get(), n, out.get(), stream);
  });
  const double backward = MedianMs(FLAGS_reps, stream, [&](int) {
    LaunchInteractionBackward(shape, x.get(), pooled.get(), dout.get(), n, dx.get(), dpooled.get(),
                              stream);
  });
  // Each reads the vectors; the forward writes its rows, the backward reads them and
  // writes the vectors' gradients.
  const double vectors = 4.0 * n * (f + 1) * d, rows_bytes = 4.0 * n * shape.row_stride();
  std::printf(
      "dot  %d x %d, stride %d: forward %.3f ms (%.0f GB/s), backward %.3f ms (%.0f GB/s)\n", f + 1,
      d, shape.row_stride(), forward, (vectors + rows_bytes) / (forward * 1e6), backward,
      (2 * vectors + rows_bytes) / (backward * 1e6));
}

int Run() {
  const std::vector<int> widths = ParseWidths("widths", FLAGS_widths);
  const std::vector<int> outs = ParseWidths("layers", FLAGS_layers);
  const DeviceInfo device = OpenDevice(0);
  std::printf("device      %s, %d SMs, batch %lld\n", device.name.c_str(), device.multiprocessors,
              static_cast<long long>(FLAGS_batch_size));
  if (FLAGS_algorithms < 0 || FLAGS_algorithms > 64)
    ThrowInvalid("--algorithms must be in [0, 64], got ", FLAGS_algorithms);
  if (FLAGS_dot_dim < 1 || FLAGS_dot_features < 0)
    ThrowInvalid("--dot_dim must be >= 1 and --dot_features >= 0, got ", FLAGS_dot_dim, " and ",
                 FLAGS_dot_features);
  if (FLAGS_dot_features > 0) {
    const int width = InteractionShape{true, FLAGS_dot_dim, FLAGS_dot_features,
                                       FLAGS_dot_dim * FLAGS_dot_features}
                          .out_dim();
    TimeDot(width);
    if (width % 4 != 0) TimeDot((width + 3) / 4 * 4);
  }
  const std::pair<const char*, MatmulPrecision> precisions[] = {
      {"highest", MatmulPrecision::kHighest},
      {"high", MatmulPrecision::kHigh},
      {"medium", MatmulPrecision::kMedium}};
  for (const auto& [name, precision] : precisions)
    for (const int width : widths) TimeMlp(name, precision, width, outs);
  if (FLAGS_algorithms > 0)
    for (const auto& [name, precision] : precisions)
      TimeAlgorithms(name, precision, widths.back(), outs);
  return 0;
}

}  // namespace
}  // namespace dlrm::cuda

int main(int argc, char** argv) {
  return dlrm::cuda::RunBench("cuda_linear_bench", argc, argv, dlrm::cuda::Run);
}

// The MLP's GEMMs on the device (engine/cuda/linear.h) for `multihot`'s top MLP, its
// first layer's input as DOT gives it (415 = 64 + 26 * 27 / 2 columns) and padded to a
// multiple of 4 (416), at each matmul precision: what rows that are only 4-byte aligned
// (cuBLASLt is told, and picks kernels without vectorized loads) cost, i.e. what the
// engine's padded interaction output buys (engine/cuda/dense_network.h, as HugeCTR pads;
// DESIGN.md, "The floor, and what 3x needs").
//
//   cuda_linear_bench [--batch_size 8192 --widths 415,416 --layers 1024,1024,512,256,1]
//
// For each width and precision: the whole MLP's forward (GEMM, bias and ReLU epilogue)
// and backward (dx, dW, db), each the median of --reps passes timed with device events,
// and the TFLOP/s of its multiply-adds. A performance figure, not a test: it asserts
// nothing (cuda_linear_test checks the results).
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
#include "engine/cuda/linear.h"

DEFINE_int64(batch_size, 8192, "rows of every GEMM");
DEFINE_string(widths, "415,416", "input widths of the first layer, comma-separated");
DEFINE_string(layers, "1024,1024,512,256,1", "output widths of the layers, comma-separated");
DEFINE_int32(reps, 20, "timed passes (median reported)");

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

void TimeMlp(const char* name, MatmulPrecision precision, int width, const std::vector<int>& outs) {
  const Stream stream;
  LinearContext context(stream, precision);
  const int64_t n = FLAGS_batch_size;
  DeviceBuffer<float> x(static_cast<size_t>(n) * width);
  FillRandom(x.get(), x.size(), 4);
  std::vector<std::unique_ptr<Layer>> layers;
  double macs = 0;
  int in = width;
  for (const int out : outs) {
    layers.push_back(std::make_unique<Layer>(n, in, out));
    macs += static_cast<double>(n) * in * out;
    in = out;
  }
  const auto act = [&](size_t l) {
    return l + 1 < layers.size() ? DeviceActivation::kRelu : DeviceActivation::kNone;
  };
  const auto input = [&](size_t l) { return l == 0 ? x.get() : layers[l - 1]->y.get(); };
  const double forward = MedianMs(FLAGS_reps, stream, [&](int) {
    for (size_t l = 0; l < layers.size(); ++l) {
      Layer& L = *layers[l];
      context.Forward(input(l), n, L.in, L.out, L.W.get(), L.b.get(), act(l), L.y.get());
    }
  });
  const double backward = MedianMs(FLAGS_reps, stream, [&](int) {
    for (size_t l = layers.size(); l-- > 0;) {
      Layer& L = *layers[l];
      context.Backward(input(l), L.y.get(), L.dy.get(), n, L.in, L.out, L.W.get(), act(l),
                       L.dx.get(), L.dW.get(), L.db.get());
    }
  });
  std::printf("mlp %4d-%s %-8s forward %.3f ms (%.1f TFLOP/s), backward %.3f ms (%.1f TFLOP/s)\n",
              width, FLAGS_layers.c_str(), name, forward, 2 * macs / (forward * 1e9), backward,
              4 * macs / (backward * 1e9));
}

int Run() {
  const std::vector<int> widths = ParseWidths("widths", FLAGS_widths);
  const std::vector<int> outs = ParseWidths("layers", FLAGS_layers);
  const DeviceInfo device = OpenDevice(0);
  std::printf("device      %s, %d SMs, batch %lld\n", device.name.c_str(), device.multiprocessors,
              static_cast<long long>(FLAGS_batch_size));
  const std::pair<const char*, MatmulPrecision> precisions[] = {
      {"highest", MatmulPrecision::kHighest},
      {"high", MatmulPrecision::kHigh},
      {"medium", MatmulPrecision::kMedium}};
  for (const auto& [name, precision] : precisions)
    for (const int width : widths) TimeMlp(name, precision, width, outs);
  return 0;
}

}  // namespace
}  // namespace dlrm::cuda

int main(int argc, char** argv) {
  return dlrm::cuda::RunBench("cuda_linear_bench", argc, argv, dlrm::cuda::Run);
}

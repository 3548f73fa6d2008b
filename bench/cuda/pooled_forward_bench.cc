// The pooled embedding forward (engine/cuda/pooled_embedding.h) and the fused backward +
// optimizer (engine/cuda/embedding_backward.h) against the device's own memory ceiling,
// measured in the same invocation (issue 13: the forward at >= 60% of a device-to-device
// copy's bandwidth on `multihot` with uniform ids).
//
//   cuda_pooled_bench [--tables 26 --rows 1000000 --dim 64 --batch_size 8192 --bag_size 10
//                      --optimizer sgd --row_warps 1,2,4,8]
//
// The copy's bandwidth counts bytes read plus bytes written; the kernels' count the fewest
// bytes they must move. Forward: every looked-up row read once (no reuse assumed: uniform
// ids over 26M rows rarely repeat within a batch), the ids and offsets read, the pooled
// output written. Backward: its sort (keys, radix sort, segments) timed alone; its update,
// at each --row_warps (the warps of a block of the few-occurrence rows' kernel), counted
// as every distinct touched row and its optimizer state read and written once, d_pooled
// read once, the sorted keys and payloads and the segments read once. Each is the median
// of --reps launches timed with device events after a warm-up; the forward rotates among
// --id_sets batches of fresh ids, so repeated launches do not find one batch's rows in
// L2 (the update repeats one batch's: its 2M rows are ~10x L2). Tables and d_pooled hold
// random values, never zeros.
// A performance figure, not a test: it asserts nothing (the GPU suites check the bits).
#include <cuda_runtime.h>
#include <gflags/gflags.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <sstream>
#include <string>
#include <vector>

#include "bench/cuda/device_timing.h"
#include "engine/config/dlrm.pb.h"
#include "engine/core/philox.h"
#include "engine/core/status.h"
#include "engine/cuda/device.h"
#include "engine/cuda/device_buffer.h"
#include "engine/cuda/embedding_backward.h"
#include "engine/cuda/pooled_embedding.h"

DEFINE_int32(tables, 26, "tables (one feature each)");
DEFINE_int64(rows, 1000000, "rows per table");
DEFINE_int32(dim, 64, "embedding dim");
DEFINE_int64(batch_size, 8192, "samples per batch");
DEFINE_int32(bag_size, 10, "ids per bag");
DEFINE_int32(reps, 50, "timed launches (median reported)");
DEFINE_int32(id_sets, 4, "distinct batches of ids, used round robin");
DEFINE_int64(copy_mib, 2048, "size of the device-to-device copy, MiB");
DEFINE_string(optimizer, "sgd", "the backward's optimizer: sgd, adagrad or rowwise_adagrad");
DEFINE_string(row_warps, "1,2,4,8", "the backward update's warps per block, each timed");

namespace dlrm::cuda {
namespace {

// GB/s of a device-to-device copy, bytes read plus written.
double CopyBandwidth(size_t bytes) {
  DeviceBuffer<uint8_t> from(bytes), to(bytes);
  CheckCuda(cudaMemset(from.get(), 0x5a, bytes), "cudaMemset");
  const double ms = MedianMs(FLAGS_reps, nullptr, [&](int) {
    CheckCuda(cudaMemcpyAsync(to.get(), from.get(), bytes, cudaMemcpyDeviceToDevice, nullptr),
              "cudaMemcpyAsync");
  });
  return 2.0 * static_cast<double>(bytes) / (ms * 1e6);
}

// One batch's ids, uniform over each feature's table, feature-major.
std::vector<DeviceId> UniformIds(int64_t per_feature, uint64_t salt) {
  const CounterRng rng(salt, 1, 0);
  std::vector<DeviceId> ids(static_cast<size_t>(per_feature) * FLAGS_tables);
  for (size_t i = 0; i < ids.size(); ++i)
    ids[i] = static_cast<DeviceId>(
        std::min(FLAGS_rows - 1, static_cast<int64_t>(rng.Uniform(i) * FLAGS_rows)));
  return ids;
}

// The tables and batches both kernels read: feature f looks up table f, bags of
// --bag_size, feature-major.
struct Setup {
  int64_t table_floats = FLAGS_rows * FLAGS_dim;
  int64_t bags = FLAGS_batch_size * FLAGS_tables;
  int64_t num_ids = bags * FLAGS_bag_size;
  int32_t width = FLAGS_tables * FLAGS_dim;
  DeviceBuffer<float> tables;
  DeviceBuffer<int64_t> offsets;
  std::vector<std::vector<DeviceId>> host_ids;
  std::vector<DeviceBuffer<DeviceId>> id_sets;

  Setup() : tables(static_cast<size_t>(table_floats) * FLAGS_tables) {
    FillRandom(tables.get(), tables.size());
    std::vector<int64_t> host_offsets(static_cast<size_t>(bags) + 1);
    for (size_t i = 0; i < host_offsets.size(); ++i)
      host_offsets[i] = static_cast<int64_t>(i) * FLAGS_bag_size;
    offsets.Upload(host_offsets, nullptr);
    id_sets.resize(static_cast<size_t>(FLAGS_id_sets));
    for (int s = 0; s < FLAGS_id_sets; ++s) {
      host_ids.push_back(UniformIds(FLAGS_batch_size * FLAGS_bag_size, 100 + s));
      id_sets[static_cast<size_t>(s)].Upload(host_ids.back(), nullptr);
    }
  }
  // The distinct (table, row) pairs of id set 0: the rows its update touches.
  int64_t DistinctRows() const {
    std::vector<int64_t> keys(host_ids[0].size());
    const int64_t per_feature = FLAGS_batch_size * FLAGS_bag_size;
    for (size_t i = 0; i < keys.size(); ++i)
      keys[i] = static_cast<int64_t>(i) / per_feature * FLAGS_rows + host_ids[0][i];
    std::sort(keys.begin(), keys.end());
    return std::unique(keys.begin(), keys.end()) - keys.begin();
  }
};

void TimeForward(Setup& setup, double copy) {
  std::vector<FeatureSpec> specs;
  for (int f = 0; f < FLAGS_tables; ++f)
    specs.push_back({setup.tables.get() + f * setup.table_floats, FLAGS_dim, f * FLAGS_dim, 0});
  DeviceBuffer<FeatureSpec> d_specs;
  d_specs.Upload(specs, nullptr);
  DeviceBuffer<float> out(static_cast<size_t>(FLAGS_batch_size) * setup.width);
  PooledForwardArgs args;
  args.features = d_specs.get();
  args.num_features = FLAGS_tables;
  args.batch_size = FLAGS_batch_size;
  args.offsets = setup.offsets.get();
  args.out = out.get();
  args.out_width = setup.width;
  const double ms = MedianMs(FLAGS_reps, nullptr, [&](int i) {
    args.ids = setup.id_sets[static_cast<size_t>(i % FLAGS_id_sets)].get();
    LaunchPooledForward(args, nullptr);
  });
  CheckCuda(cudaGetLastError(), "pooled forward");
  const double bytes = static_cast<double>(setup.num_ids) * (FLAGS_dim * 4.0 + sizeof(DeviceId)) +
                       static_cast<double>(setup.bags + 1) * 8.0 +
                       static_cast<double>(out.size()) * 4.0;
  const double gbs = bytes / (ms * 1e6);
  std::printf(
      "forward     %.3f ms for %lld ids of dim %d, %.1f MB moved: %.0f GB/s = %.2f x copy\n", ms,
      static_cast<long long>(setup.num_ids), FLAGS_dim, bytes / 1e6, gbs, gbs / copy);
}

// --optimizer as a config, and the floats of state it keeps per row of dim values.
config::SparseOptimizerConfig Optimizer(int64_t* state_per_row) {
  config::SparseOptimizerConfig c;
  *state_per_row = 0;
  if (FLAGS_optimizer == "adagrad") {
    c.mutable_adagrad()->set_eps(1e-8f);
    *state_per_row = FLAGS_dim;
  } else if (FLAGS_optimizer == "rowwise_adagrad") {
    c.mutable_rowwise_adagrad()->set_eps(1e-8f);
    *state_per_row = 1;
  } else if (FLAGS_optimizer != "sgd") {
    ThrowInvalid("--optimizer must be sgd, adagrad or rowwise_adagrad, got '", FLAGS_optimizer,
                 "'");
  }
  return c;
}

std::vector<int> RowWarpsList() {
  std::vector<int> list;
  std::stringstream in(FLAGS_row_warps);
  for (std::string item; std::getline(in, item, ',');) {
    size_t used = 0;
    try {
      list.push_back(std::stoi(item, &used));
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != item.size())
      ThrowInvalid("--row_warps must list integers separated by commas, got '", FLAGS_row_warps,
                   "'");
  }
  return list;
}

// The backward's arguments over setup's tables (and `state`, per_row floats a row), id set 0.
struct BackwardInputs {
  DeviceBuffer<SparseFeatureArgs> features;
  DeviceBuffer<SparseTableArgs> tables;
  DeviceBuffer<float> d_pooled;
  DeviceBuffer<SparseStepArgs> step;
  EmbeddingBackwardArgs args;

  BackwardInputs(Setup& setup, float* state, int64_t per_row,
                 const config::SparseOptimizerConfig& optimizer)
      : d_pooled(static_cast<size_t>(FLAGS_batch_size) * setup.width) {
    std::vector<SparseFeatureArgs> f;
    std::vector<SparseTableArgs> t;
    for (int i = 0; i < FLAGS_tables; ++i) {
      f.push_back({i, i * FLAGS_dim, 0});
      SparseTableArgs table;
      table.weights = setup.tables.get() + i * setup.table_floats;
      table.num_rows = FLAGS_rows;
      table.dim = FLAGS_dim;
      if (per_row > 0) table.state0 = state + i * FLAGS_rows * per_row;
      t.push_back(table);
    }
    features.Upload(f, nullptr);
    tables.Upload(t, nullptr);
    FillRandom(d_pooled.get(), d_pooled.size(), 11);
    step.Upload({MakeSparseStepArgs(optimizer, 1e-3f, 1)}, nullptr);
    args.features = features.get();
    args.num_features = FLAGS_tables;
    args.tables = tables.get();
    args.num_tables = FLAGS_tables;
    args.max_dim = FLAGS_dim;
    args.batch_size = FLAGS_batch_size;
    args.offsets = setup.offsets.get();
    args.ids = setup.id_sets[0].get();
    args.id_bits = EmbeddingBackward::IdBitsFor(FLAGS_rows);
    args.num_ids = setup.num_ids;
    args.d_pooled = d_pooled.get();
    args.pooled_width = setup.width;
  }
};

// Adagrad's sums of squares into `state`: positive, 0.01 plus a value in [0, 1).
void FillSumsOfSquares(DeviceBuffer<float>* state) {
  std::vector<float> sums(size_t{1} << 20);
  const CounterRng rng(13, 0, 0);
  for (size_t i = 0; i < sums.size(); ++i) sums[i] = 0.01f + static_cast<float>(rng.Uniform(i));
  FillRepeating(state->get(), state->size(), sums);
}

void TimeBackward(Setup& setup, double copy) {
  int64_t per_row = 0;
  const config::SparseOptimizerConfig optimizer = Optimizer(&per_row);
  DeviceBuffer<float> state(
      static_cast<size_t>(std::max<int64_t>(per_row * FLAGS_rows * FLAGS_tables, 1)));
  FillSumsOfSquares(&state);
  BackwardInputs in(setup, state.get(), per_row, optimizer);
  const EmbeddingBackwardArgs& args = in.args;
  EmbeddingBackward sort;
  sort.Prepare(args);
  const double sort_ms = MedianMs(FLAGS_reps, nullptr, [&](int) { sort.Sort(args, nullptr); });
  std::printf("sort        %.3f ms for %lld ids (keys, radix sort, segments)\n", sort_ms,
              static_cast<long long>(setup.num_ids));
  const auto rows = static_cast<double>(setup.DistinctRows());
  const double bytes = rows * (FLAGS_dim + static_cast<double>(per_row)) * 4.0 * 2.0 +
                       static_cast<double>(in.d_pooled.size()) * 4.0 +
                       static_cast<double>(setup.num_ids) * 16.0 + rows * 12.0;
  for (const int warps : RowWarpsList()) {
    EmbeddingBackward backward(warps);
    backward.Prepare(args);
    backward.Sort(args, nullptr);
    const double ms =
        MedianMs(FLAGS_reps, nullptr, [&](int) { backward.Update(args, in.step.get(), nullptr); });
    CheckCuda(cudaGetLastError(), "embedding update");
    const double gbs = bytes / (ms * 1e6);
    std::printf(
        "update %-4s %.3f ms, %d warps a block, %.0f rows, %.1f MB at least: %.0f GB/s = %.2f x "
        "copy\n",
        FLAGS_optimizer.c_str(), ms, warps, rows, bytes / 1e6, gbs, gbs / copy);
  }
}

int Run() {
  const DeviceInfo device = OpenDevice(0);
  const double copy = CopyBandwidth(static_cast<size_t>(FLAGS_copy_mib) << 20);
  std::printf("device      %s, %d SMs\n", device.name.c_str(), device.multiprocessors);
  std::printf("copy        %.0f GB/s (device to device, read + written, %lld MiB)\n", copy,
              static_cast<long long>(FLAGS_copy_mib));
  Setup setup;
  TimeForward(setup, copy);
  TimeBackward(setup, copy);
  return 0;
}

}  // namespace
}  // namespace dlrm::cuda

int main(int argc, char** argv) {
  return dlrm::cuda::RunBench("cuda_pooled_bench", argc, argv, dlrm::cuda::Run);
}

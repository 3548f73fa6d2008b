// The pooled embedding forward (engine/cuda/pooled_embedding.h) against the device's own
// memory ceiling, measured in the same invocation (issue 13: the forward at >= 60% of a
// device-to-device copy's bandwidth on `multihot` with uniform ids).
//
//   cuda_pooled_bench [--tables 26 --rows 1000000 --dim 64 --batch_size 8192 --bag_size 10]
//
// The copy's bandwidth counts bytes read plus bytes written; the forward's counts the
// fewest bytes it must move: every looked-up row read once (no reuse assumed: uniform ids
// over 26M rows rarely repeat within a batch), the ids and offsets read, the pooled output
// written. Both are the median of --reps launches timed with device events after a
// warm-up; the forward rotates among --id_sets batches of fresh ids, so repeated launches
// do not find one batch's rows in L2. Tables hold random values, never zeros.
// A performance figure, not a test: it asserts nothing (the GPU suites check the bits).
#include <cuda_runtime.h>
#include <gflags/gflags.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "bench/cuda/device_timing.h"
#include "engine/core/philox.h"
#include "engine/core/status.h"
#include "engine/cuda/device.h"
#include "engine/cuda/device_buffer.h"
#include "engine/cuda/pooled_embedding.h"

DEFINE_int32(tables, 26, "tables (one feature each)");
DEFINE_int64(rows, 1000000, "rows per table");
DEFINE_int32(dim, 64, "embedding dim");
DEFINE_int64(batch_size, 8192, "samples per batch");
DEFINE_int32(bag_size, 10, "ids per bag");
DEFINE_int32(reps, 50, "timed launches (median reported)");
DEFINE_int32(id_sets, 4, "distinct batches of ids, used round robin");
DEFINE_int64(copy_mib, 2048, "size of the device-to-device copy, MiB");

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

int Run() {
  const DeviceInfo device = OpenDevice(0);
  const double copy = CopyBandwidth(static_cast<size_t>(FLAGS_copy_mib) << 20);
  const int64_t table_floats = FLAGS_rows * FLAGS_dim;
  DeviceBuffer<float> tables(static_cast<size_t>(table_floats) * FLAGS_tables);
  FillRandom(tables.get(), tables.size());
  std::vector<FeatureSpec> specs;
  for (int f = 0; f < FLAGS_tables; ++f)
    specs.push_back({tables.get() + f * table_floats, FLAGS_dim, f * FLAGS_dim, 0});
  DeviceBuffer<FeatureSpec> d_specs;
  d_specs.Upload(specs, nullptr);
  const int64_t bags = FLAGS_batch_size * FLAGS_tables, num_ids = bags * FLAGS_bag_size;
  std::vector<int64_t> offsets(static_cast<size_t>(bags) + 1);
  for (size_t i = 0; i < offsets.size(); ++i) offsets[i] = static_cast<int64_t>(i) * FLAGS_bag_size;
  DeviceBuffer<int64_t> d_offsets;
  d_offsets.Upload(offsets, nullptr);
  std::vector<DeviceBuffer<DeviceId>> id_sets(static_cast<size_t>(FLAGS_id_sets));
  for (int s = 0; s < FLAGS_id_sets; ++s)
    id_sets[static_cast<size_t>(s)].Upload(UniformIds(FLAGS_batch_size * FLAGS_bag_size, 100 + s),
                                           nullptr);
  DeviceBuffer<float> out(static_cast<size_t>(FLAGS_batch_size) * FLAGS_tables * FLAGS_dim);
  PooledForwardArgs args;
  args.features = d_specs.get();
  args.num_features = FLAGS_tables;
  args.batch_size = FLAGS_batch_size;
  args.offsets = d_offsets.get();
  args.out = out.get();
  args.out_width = FLAGS_tables * FLAGS_dim;
  const double ms = MedianMs(FLAGS_reps, nullptr, [&](int i) {
    args.ids = id_sets[static_cast<size_t>(i % FLAGS_id_sets)].get();
    LaunchPooledForward(args, nullptr);
  });
  CheckCuda(cudaGetLastError(), "pooled forward");
  const double bytes = static_cast<double>(num_ids) * (FLAGS_dim * 4.0 + sizeof(DeviceId)) +
                       static_cast<double>(bags + 1) * 8.0 + static_cast<double>(out.size()) * 4.0;
  const double gbs = bytes / (ms * 1e6);
  std::printf("device      %s, %d SMs\n", device.name.c_str(), device.multiprocessors);
  std::printf("copy        %.0f GB/s (device to device, read + written, %lld MiB)\n", copy,
              static_cast<long long>(FLAGS_copy_mib));
  std::printf(
      "forward     %.3f ms for %lld ids of dim %d, %.1f MB moved: %.0f GB/s = %.2f x copy\n", ms,
      static_cast<long long>(num_ids), FLAGS_dim, bytes / 1e6, gbs, gbs / copy);
  return 0;
}

}  // namespace
}  // namespace dlrm::cuda

int main(int argc, char** argv) {
  return dlrm::cuda::RunBench("cuda_pooled_bench", argc, argv, dlrm::cuda::Run);
}

#include <cmath>
#include <cub/cub.cuh>

#include "engine/core/status.h"
#include "engine/cuda/device.h"
#include "engine/cuda/embedding_backward.h"

namespace dlrm::cuda {
namespace {

constexpr int kIdBits = 40;  // key = table << kIdBits | id
static_assert(EmbeddingBackward::kMaxRows == int64_t{1} << kIdBits);
constexpr int kThreads = 256;
constexpr int kWarp = 32;

enum Kind : int { kSgd = 0, kAdagrad = 1, kRowwise = 2, kAdam = 3 };

// One thread per bag (f, b): each occurrence's key, position and gradient source.
__global__ void KeyOccurrences(EmbeddingBackwardArgs a, uint64_t* keys, int64_t* positions,
                               int64_t* bases, float* coefs) {
  const int64_t bag = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (bag >= a.num_features * a.batch_size) return;
  const int64_t f = bag / a.batch_size, b = bag % a.batch_size;
  const SparseFeatureArgs feature = a.features[f];
  const int64_t begin = a.offsets[bag], end = a.offsets[bag + 1];
  const float scale = feature.mean ? __fdiv_rn(1.0f, static_cast<float>(end - begin)) : 1.0f;
  for (int64_t i = begin; i < end; ++i) {
    keys[i] = static_cast<uint64_t>(feature.table) << kIdBits | static_cast<uint64_t>(a.ids[i]);
    positions[i] = i;
    bases[i] = b * a.pooled_width + feature.pooled_offset;
    coefs[i] = __fmul_rn(a.weights != nullptr ? a.weights[i] : 1.0f, scale);
  }
}

// The CPU's SquaredNorm (sparse_optimizer.cc): 8 interleaved partial sums, fixed tree.
__device__ float SquaredNorm(const float* g, int dim) {
  float part[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (int k = 0; k < dim; ++k) part[k & 7] = __fadd_rn(part[k & 7], __fmul_rn(g[k], g[k]));
  return __fadd_rn(__fadd_rn(__fadd_rn(part[0], part[4]), __fadd_rn(part[2], part[6])),
                   __fadd_rn(__fadd_rn(part[1], part[5]), __fadd_rn(part[3], part[7])));
}

__device__ void UpdateElement(const SparseStepArgs& o, const SparseTableArgs& t, int64_t row, int k,
                              float g, float rowwise_denom) {
  const int64_t at = row * t.dim + k;
  float* w = t.weights + at;
  switch (o.kind) {
    case kSgd: *w = __fsub_rn(*w, __fmul_rn(o.lr, g)); break;
    case kAdagrad: {
      const float s = __fadd_rn(t.state0[at], __fmul_rn(g, g));
      t.state0[at] = s;
      *w = __fsub_rn(*w, __fdiv_rn(__fmul_rn(o.lr, g), __fadd_rn(__fsqrt_rn(s), o.eps)));
      break;
    }
    case kRowwise: *w = __fsub_rn(*w, __fdiv_rn(__fmul_rn(o.lr, g), rowwise_denom)); break;
    default: {  // Adam
      const float m =
          __fadd_rn(__fmul_rn(o.beta1, t.state0[at]), __fmul_rn(__fsub_rn(1.0f, o.beta1), g));
      const float v = __fadd_rn(__fmul_rn(o.beta2, t.state1[at]),
                                __fmul_rn(__fmul_rn(__fsub_rn(1.0f, o.beta2), g), g));
      t.state0[at] = m;
      t.state1[at] = v;
      const float denom = __fadd_rn(__fsqrt_rn(__fdiv_rn(v, o.bias2)), o.eps);
      *w = __fsub_rn(*w, __fdiv_rn(__fmul_rn(o.lr, __fdiv_rn(m, o.bias1)), denom));
    }
  }
}

// One warp per touched row (segment s): the row's gradient into shared memory, each
// column summed over the segment's occurrences in order, then the optimizer once.
__global__ void UpdateRows(EmbeddingBackwardArgs a, const SparseStepArgs* step,
                           const uint64_t* keys, const int64_t* positions,
                           const int64_t* segment_begin, const int32_t* counts,
                           const int32_t* num_segments, const int64_t* bases, const float* coefs) {
  extern __shared__ float grad[];  // [max_dim], then row-wise Adagrad's denominator
  const int64_t s = blockIdx.x;
  if (s >= *num_segments || (a.skip != nullptr && *a.skip != 0)) return;
  const SparseStepArgs o = *step;
  const int64_t begin = segment_begin[s], end = begin + counts[s];
  const uint64_t key = keys[begin];
  const SparseTableArgs t = a.tables[key >> kIdBits];
  const auto row = static_cast<int64_t>(key & ((uint64_t{1} << kIdBits) - 1));
  for (int k = threadIdx.x; k < t.dim; k += blockDim.x) {
    float g = 0.0f;
    for (int64_t j = begin; j < end; ++j) {
      const int64_t p = positions[j];
      g = __fadd_rn(g, __fmul_rn(coefs[p], a.d_pooled[bases[p] + k]));
    }
    grad[k] = g;
  }
  __syncthreads();
  float& rowwise_denom = grad[a.max_dim];
  if (o.kind == kRowwise && threadIdx.x == 0) {
    const float h =
        __fadd_rn(t.state0[row], __fdiv_rn(SquaredNorm(grad, t.dim), static_cast<float>(t.dim)));
    t.state0[row] = h;
    rowwise_denom = __fadd_rn(__fsqrt_rn(h), o.eps);
  }
  __syncthreads();
  for (int k = threadIdx.x; k < t.dim; k += blockDim.x)
    UpdateElement(o, t, row, k, grad[k], rowwise_denom);
}

void CheckArgs(const EmbeddingBackwardArgs& a) {
  if (a.num_features < 0 || a.num_tables < 1 || a.batch_size < 1 || a.num_ids < 0 ||
      a.max_dim < 1 || a.pooled_width < 1)
    ThrowInvalid("embedding backward: num_features ", a.num_features, ", num_tables ", a.num_tables,
                 ", batch_size ", a.batch_size, ", num_ids ", a.num_ids, ", max_dim ", a.max_dim,
                 " and pooled_width ", a.pooled_width, " must be >= 0 (tables, batch, dims >= 1)");
  if (a.num_tables >= (1 << (64 - kIdBits - 1)))
    ThrowInvalid("embedding backward: ", a.num_tables, " tables are more than the key holds");
  if (a.num_ids > INT32_MAX)
    ThrowInvalid("embedding backward: num_ids ", a.num_ids, " is more than 2^31 - 1");
}

size_t SharedBytes(int32_t max_dim) { return (static_cast<size_t>(max_dim) + 1) * sizeof(float); }

int BitsFor(int64_t values) {
  int bits = 0;
  while ((int64_t{1} << bits) < values) ++bits;
  return bits;
}

}  // namespace

SparseStepArgs MakeSparseStepArgs(const config::SparseOptimizerConfig& c, float lr, int64_t step) {
  if (step < 1) ThrowInvalid("embedding backward: step must be >= 1, got ", step);
  SparseStepArgs o;
  o.kind = kSgd;
  o.lr = lr;
  switch (c.kind_case()) {
    case config::SparseOptimizerConfig::kAdagrad:
      o.kind = kAdagrad;
      o.eps = c.adagrad().eps();
      break;
    case config::SparseOptimizerConfig::kRowwiseAdagrad:
      o.kind = kRowwise;
      o.eps = c.rowwise_adagrad().eps();
      break;
    case config::SparseOptimizerConfig::kAdam: {
      o.kind = kAdam;
      o.eps = c.adam().eps();
      o.beta1 = c.adam().beta1();
      o.beta2 = c.adam().beta2();
      // As the CPU: in double, then rounded to float once.
      const auto t = static_cast<double>(step);
      o.bias1 = static_cast<float>(1.0 - std::pow(static_cast<double>(o.beta1), t));
      o.bias2 = static_cast<float>(1.0 - std::pow(static_cast<double>(o.beta2), t));
      break;
    }
    default: break;
  }
  return o;
}

int32_t EmbeddingBackward::MaxDim(size_t shared_bytes_per_block) {
  return static_cast<int32_t>(shared_bytes_per_block / sizeof(float)) - 1;
}

void EmbeddingBackward::Prepare(const EmbeddingBackwardArgs& args) {
  CheckArgs(args);
  const int64_t n = args.num_ids;
  if (n == 0) return;
  for (auto* b : {&keys_, &sorted_keys_, &unique_keys_}) b->Reserve(n);
  for (auto* b : {&positions_, &sorted_positions_, &segment_begin_, &bases_}) b->Reserve(n);
  coefs_.Reserve(n);
  counts_.Reserve(n);
  num_segments_.Reserve(1);
  ReserveTemp(n, EndBit(args));
  const size_t shared = SharedBytes(args.max_dim);
  if (shared > shared_bytes_) {  // past the default 48 KiB: the block opts in
    CheckCuda(cudaFuncSetAttribute(UpdateRows, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   static_cast<int>(shared)),
              "cudaFuncSetAttribute (embedding update shared memory)");
    shared_bytes_ = shared;
  }
}

int EmbeddingBackward::EndBit(const EmbeddingBackwardArgs& args) {
  return kIdBits + BitsFor(args.num_tables);
}

void EmbeddingBackward::ReserveTemp(int64_t n, int end_bit) {
  size_t sort_bytes = 0, encode_bytes = 0, scan_bytes = 0;
  const int items = static_cast<int>(n);
  CheckCuda(
      cub::DeviceRadixSort::SortPairs(nullptr, sort_bytes, keys_.get(), sorted_keys_.get(),
                                      positions_.get(), sorted_positions_.get(), items, 0, end_bit),
      "cub::DeviceRadixSort::SortPairs (size)");
  CheckCuda(cub::DeviceRunLengthEncode::Encode(nullptr, encode_bytes, sorted_keys_.get(),
                                               unique_keys_.get(), counts_.get(),
                                               num_segments_.get(), items),
            "cub::DeviceRunLengthEncode::Encode (size)");
  CheckCuda(cub::DeviceScan::ExclusiveSum(nullptr, scan_bytes, counts_.get(), segment_begin_.get(),
                                          items),
            "cub::DeviceScan::ExclusiveSum (size)");
  cub_temp_.Reserve(std::max(sort_bytes, std::max(encode_bytes, scan_bytes)));
}

void EmbeddingBackward::SortAndSegment(int64_t n, int end_bit, cudaStream_t stream) {
  const int items = static_cast<int>(n);
  size_t bytes = cub_temp_.size();
  CheckCuda(cub::DeviceRadixSort::SortPairs(cub_temp_.get(), bytes, keys_.get(), sorted_keys_.get(),
                                            positions_.get(), sorted_positions_.get(), items, 0,
                                            end_bit, stream),
            "cub::DeviceRadixSort::SortPairs");
  // Counts past the last segment stay 0, so the scan over n items is defined.
  CheckCuda(cudaMemsetAsync(counts_.get(), 0, n * sizeof(int32_t), stream), "cudaMemsetAsync");
  bytes = cub_temp_.size();
  CheckCuda(cub::DeviceRunLengthEncode::Encode(cub_temp_.get(), bytes, sorted_keys_.get(),
                                               unique_keys_.get(), counts_.get(),
                                               num_segments_.get(), items, stream),
            "cub::DeviceRunLengthEncode::Encode");
  bytes = cub_temp_.size();
  CheckCuda(cub::DeviceScan::ExclusiveSum(cub_temp_.get(), bytes, counts_.get(),
                                          segment_begin_.get(), items, stream),
            "cub::DeviceScan::ExclusiveSum");
}

void EmbeddingBackward::Run(const EmbeddingBackwardArgs& args, const SparseStepArgs* step_args,
                            cudaStream_t stream) {
  Prepare(args);  // nothing left to do when the caller prepared these sizes
  const int64_t n = args.num_ids;
  if (n == 0) return;
  const int64_t bags = args.num_features * args.batch_size;
  KeyOccurrences<<<static_cast<unsigned>((bags + kThreads - 1) / kThreads), kThreads, 0, stream>>>(
      args, keys_.get(), positions_.get(), bases_.get(), coefs_.get());
  CheckCuda(cudaGetLastError(), "embedding backward: keys");
  SortAndSegment(n, EndBit(args), stream);
  // Launched for the most segments there can be; the blocks past the real count return.
  UpdateRows<<<static_cast<unsigned>(n), kWarp, SharedBytes(args.max_dim), stream>>>(
      args, step_args, sorted_keys_.get(), sorted_positions_.get(), segment_begin_.get(),
      counts_.get(), num_segments_.get(), bases_.get(), coefs_.get());
  CheckCuda(cudaGetLastError(), "embedding backward: update");
}

}  // namespace dlrm::cuda

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cub/cub.cuh>
#include <map>
#include <mutex>
#include <type_traits>
#include <utility>

#include "engine/core/status.h"
#include "engine/cuda/device.h"
#include "engine/cuda/embedding_backward.h"
#include "engine/embedding/half_bits.h"

namespace dlrm::cuda {
namespace {

// key = table << id_bits | id (EmbeddingBackwardArgs::id_bits <= 32): a stable sort of the
// keys orders the occurrences by table, then id, then position.
constexpr int kMaxIdBits = 32;
static_assert(kMaxDeviceRows == int64_t{1} << kMaxIdBits);
// A table index (an int32, at most 31 bits) above the id bits: every key fits 64 bits.
static_assert(kMaxIdBits + 31 <= 64);
constexpr int kThreads = 256;
constexpr int kWarp = 32;
constexpr int64_t kMaxPooledValues = int64_t{1} << 32;

enum Kind : int { kSgd = 0, kAdagrad = 1, kRowwise = 2, kAdam = 3 };

// An occurrence's sort payload: its d_pooled row's first element (below 2^32: CheckArgs)
// in the low half and its coefficient's bits (per-id weight, / bag length for MEAN) in the
// high half, so that the update reads both with the sorted key, one load.
__device__ uint64_t PackOccurrence(int64_t base, float coef) {
  return static_cast<uint64_t>(__float_as_uint(coef)) << 32 | static_cast<uint32_t>(base);
}
__device__ uint32_t OccurrenceBase(uint64_t o) { return static_cast<uint32_t>(o); }
__device__ float OccurrenceCoef(uint64_t o) {
  return __uint_as_float(static_cast<uint32_t>(o >> 32));
}

// One thread per bag (f, b): each occurrence's key and payload.
__global__ void KeyOccurrences(EmbeddingBackwardArgs a, uint64_t* keys, uint64_t* occurrences) {
  const int64_t bag = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (bag >= a.num_features * a.batch_size) return;
  const int64_t f = bag / a.batch_size, b = bag % a.batch_size;
  const SparseFeatureArgs feature = a.features[f];
  const int64_t begin = a.offsets[bag], end = a.offsets[bag + 1];
  const float scale = feature.mean ? __fdiv_rn(1.0f, static_cast<float>(end - begin)) : 1.0f;
  const int64_t base = b * a.pooled_width + feature.pooled_offset;
  for (int64_t i = begin; i < end; ++i) {
    keys[i] = static_cast<uint64_t>(feature.table) << a.id_bits | a.ids[i];
    occurrences[i] =
        PackOccurrence(base, __fmul_rn(a.weights != nullptr ? a.weights[i] : 1.0f, scale));
  }
}

// The CPU's SquaredNorm (sparse_optimizer.cc): 8 interleaved partial sums, fixed tree.
__device__ float SquaredNorm(const float* g, int dim) {
  float part[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (int k = 0; k < dim; ++k) part[k & 7] = __fadd_rn(part[k & 7], __fmul_rn(g[k], g[k]));
  return __fadd_rn(__fadd_rn(__fadd_rn(part[0], part[4]), __fadd_rn(part[2], part[6])),
                   __fadd_rn(__fadd_rn(part[1], part[5]), __fadd_rn(part[3], part[7])));
}

// The element's value updated by the optimizer (its state updated in place).
__device__ float UpdatedValue(const SparseStepArgs& o, const SparseTableArgs& t, int64_t at,
                              float w, float g, float rowwise_denom) {
  switch (o.kind) {
    case kSgd: return __fsub_rn(w, __fmul_rn(o.lr, g));
    case kAdagrad: {
      const float s = __fadd_rn(t.state0[at], __fmul_rn(g, g));
      t.state0[at] = s;
      return __fsub_rn(w, __fdiv_rn(__fmul_rn(o.lr, g), __fadd_rn(__fsqrt_rn(s), o.eps)));
    }
    case kRowwise: return __fsub_rn(w, __fdiv_rn(__fmul_rn(o.lr, g), rowwise_denom));
    default: {  // Adam
      const float m =
          __fadd_rn(__fmul_rn(o.beta1, t.state0[at]), __fmul_rn(__fsub_rn(1.0f, o.beta1), g));
      const float v = __fadd_rn(__fmul_rn(o.beta2, t.state1[at]),
                                __fmul_rn(__fmul_rn(__fsub_rn(1.0f, o.beta2), g), g));
      t.state0[at] = m;
      t.state1[at] = v;
      const float denom = __fadd_rn(__fsqrt_rn(__fdiv_rn(v, o.bias2)), o.eps);
      return __fsub_rn(w, __fdiv_rn(__fmul_rn(o.lr, __fdiv_rn(m, o.bias1)), denom));
    }
  }
}

// The row whose random bits `row`'s stochastic rounding draws (HalfRounding's R, keyed as
// the CPU's StoreRow keys it).
__device__ int64_t RoundingRow(const SparseTableArgs& t, int64_t row) {
  return t.row_begin + (t.row_keys != nullptr ? t.row_keys[row] : row);
}

// Element k of `row` updated: an FP32 row in place; a 16-bit one widened, updated and
// narrowed as the CPU's StoreRow does (the same random bits when stochastic, those of
// table row key_row: RoundingRow).
__device__ void UpdateElement(const SparseStepArgs& o, const SparseTableArgs& t, int64_t row,
                              int64_t key_row, int k, float g, float rowwise_denom) {
  const int64_t at = row * t.dim + k;
  if (t.half == 0) {
    t.weights[at] = UpdatedValue(o, t, at, t.weights[at], g, rowwise_denom);
    return;
  }
  const bool bf16 = t.half == 1;
  const float w = UpdatedValue(o, t, at, half_bits::Widen(t.halves[at], bf16), g, rowwise_denom);
  const uint16_t random =
      t.stochastic != 0 ? half_bits::RoundingWord(t.rounding_key, o.step, key_row, t.col_begin + k)
                        : 0;
  t.halves[at] = half_bits::Narrow(w, bf16, t.stochastic != 0, random);
}

constexpr int kUnroll = 8;  // occurrences whose d_pooled loads are in flight together
// A row of more occurrences than this is "hot": UpdateRows lists it and UpdateHotRows, a
// block of kHotThreads per row, stages its d_pooled rows through shared memory.
constexpr int32_t kHotCount = 64;
constexpr int kHotThreads = 256;
constexpr int kStageFloats = 8192;           // UpdateHotRows' staged d_pooled values (32 KiB)
constexpr int64_t kMaxGridRowWarps = 16384;  // UpdateRows' grid: each warp strides over rows
constexpr int kMaxBlockThreads = EmbeddingBackward::kMaxRowWarpsPerBlock * kWarp;  // UpdateRows
constexpr int64_t kMaxHotBlocks = 1024;  // UpdateHotRows' grid

// The threads that update one row together: one warp of UpdateRows' blocks (rows of few
// occurrences), or a whole block of UpdateHotRows (which stages d_pooled rows).
struct WarpGroup {
  static constexpr bool kStages = false;
  __device__ int rank() const { return static_cast<int>(threadIdx.x) % kWarp; }
  __device__ int size() const { return kWarp; }
  __device__ void sync() const { __syncwarp(); }
};
struct BlockGroup {
  static constexpr bool kStages = true;
  __device__ int rank() const { return static_cast<int>(threadIdx.x); }
  __device__ int size() const { return static_cast<int>(blockDim.x); }
  __device__ void sync() const { __syncthreads(); }
};

// The shared memory of a group of `threads` updating rows of <= max_dim columns: the
// row's gradient [max_dim], row-wise Adagrad's denominator, one chunk of `threads`
// occurrences' d_pooled bases and coefficients, then `stage` floats.
struct RowScratch {
  float* grad;
  uint32_t* chunk_base;  // an occurrence's d_pooled offset (below 2^32: CheckArgs)
  float* chunk_coef;
  float* stage;
};
// 16-byte aligned, so that stage (after 256 bases and coefficients) takes float4 stores;
// SharedBytes(max_dim, kWarp, 0) is a multiple of 16, so warps' scratch can follow each other.
__host__ __device__ size_t ChunkOffset(int32_t max_dim) {
  return ((static_cast<size_t>(max_dim) + 1) * sizeof(float) + 15) / 16 * 16;
}
__host__ __device__ size_t SharedBytes(int32_t max_dim, int threads, int stage) {
  return ChunkOffset(max_dim) + threads * (sizeof(uint32_t) + sizeof(float)) +
         static_cast<size_t>(stage) * sizeof(float);
}
__device__ RowScratch CarveShared(unsigned char* shared, int32_t max_dim, int threads) {
  RowScratch r;
  r.grad = reinterpret_cast<float*>(shared);
  r.chunk_base = reinterpret_cast<uint32_t*>(shared + ChunkOffset(max_dim));
  r.chunk_coef = reinterpret_cast<float*>(r.chunk_base + threads);
  r.stage = r.chunk_coef + threads;
  return r;
}

// g plus column k's share of m occurrences, in order; the kUnroll loads of d_pooled
// are issued before their products are summed.
__device__ float SumChunk(const float* d_pooled_k, const uint32_t* base, const float* coef, int m,
                          float g) {
  int i = 0;
  for (; i + kUnroll <= m; i += kUnroll) {
    float v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) v[u] = d_pooled_k[base[i + u]];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) g = __fadd_rn(g, __fmul_rn(coef[i + u], v[u]));
  }
  for (; i < m; ++i) g = __fadd_rn(g, __fmul_rn(coef[i], d_pooled_k[base[i]]));
  return g;
}

// Floats each of UpdateHotRows' threads loads per stage.
constexpr int kStagePerThread = kStageFloats / kHotThreads;

// The block (of kHotThreads) copies the d_pooled rows of m occurrences into stage
// [m x dim], every thread's loads issued before any is stored (one trip to memory per
// stage), W floats at a time (dim and every base a multiple of W); then each column k adds
// their products into grad[k] in order.
template <int W>
__device__ void SumStaged(const float* d_pooled, const uint32_t* base, const float* coef, int m,
                          int32_t dim, const RowScratch& s) {
  using Vec = std::conditional_t<W == 4, float4, float>;
  constexpr int kLoads = kStagePerThread / W;
  const int dim_w = dim / W, count = m * dim_w;
  Vec v[kLoads];
#pragma unroll
  for (int u = 0; u < kLoads; ++u) {
    const int e = static_cast<int>(threadIdx.x) + u * kHotThreads;
    if (e < count) {
      const int i = e / dim_w;
      v[u] = reinterpret_cast<const Vec*>(d_pooled + base[i])[e - i * dim_w];
    }
  }
#pragma unroll
  for (int u = 0; u < kLoads; ++u) {
    const int e = static_cast<int>(threadIdx.x) + u * kHotThreads;
    if (e < count) reinterpret_cast<Vec*>(s.stage)[e] = v[u];
  }
  __syncthreads();
  for (int k = threadIdx.x; k < dim; k += blockDim.x) {
    float g = s.grad[k];
#pragma unroll 8
    for (int i = 0; i < m; ++i) g = __fadd_rn(g, __fmul_rn(coef[i], s.stage[i * dim + k]));
    s.grad[k] = g;
  }
  __syncthreads();  // before the next stage overwrites this one
}

// 1 if every d_pooled row this kernel reads loads as float4: 16-byte aligned d_pooled, and
// the row width, every table's dim and every feature's offset multiples of 4.
__device__ bool RowsLoadAsFloat4(const EmbeddingBackwardArgs& a) {
  bool ok = reinterpret_cast<uintptr_t>(a.d_pooled) % 16 == 0 && a.pooled_width % 4 == 0;
  for (int32_t t = 0; t < a.num_tables; ++t) ok = ok && a.tables[t].dim % 4 == 0;
  for (int32_t f = 0; f < a.num_features; ++f) ok = ok && a.features[f].pooled_offset % 4 == 0;
  return ok;
}

// grad[k] = the sum over the sorted occurrences [begin, end) of coef * d_pooled[base + k],
// in order. The group gathers group.size() occurrences at a time into shared memory; a
// block with `stage` floats of shared memory stages their d_pooled rows too.
template <typename Group>
__device__ void SumRowGradient(const Group& group, const float* d_pooled,
                               const uint64_t* occurrences, int64_t begin, int64_t end, int32_t dim,
                               int stage, bool vec4, const RowScratch& s) {
  const int t = group.rank(), threads = group.size();
  for (int k = t; k < dim; k += threads) s.grad[k] = 0.0f;
  const int per_stage = stage / dim;  // rows staged at once; 0: read in place
  for (int64_t j0 = begin; j0 < end; j0 += threads) {
    const auto m = static_cast<int>(min(static_cast<int64_t>(threads), end - j0));
    group.sync();  // the previous chunk's readers are done
    if (t < m) {
      const uint64_t o = occurrences[j0 + t];
      s.chunk_base[t] = OccurrenceBase(o);
      s.chunk_coef[t] = OccurrenceCoef(o);
    }
    group.sync();
    if (!Group::kStages || per_stage == 0) {
      for (int k = t; k < dim; k += threads)
        s.grad[k] = SumChunk(d_pooled + k, s.chunk_base, s.chunk_coef, m, s.grad[k]);
      continue;
    }
    if constexpr (Group::kStages) {
      for (int i0 = 0; i0 < m; i0 += per_stage) {
        const int rows = min(per_stage, m - i0);
        if (vec4)
          SumStaged<4>(d_pooled, s.chunk_base + i0, s.chunk_coef + i0, rows, dim, s);
        else
          SumStaged<1>(d_pooled, s.chunk_base + i0, s.chunk_coef + i0, rows, dim, s);
      }
    }
  }
  group.sync();
}

// Asks L2 for the line holding p (device memory); changes no value.
__device__ void PrefetchL2(const void* p) {
  asm volatile("prefetch.global.L2 [%0];" ::"l"(__cvta_generic_to_global(p)));
}

// The group asks L2 for the lines of values[0, dim), 128 bytes each.
template <typename Group, typename V>
__device__ void PrefetchValues(const Group& group, const V* values, int32_t dim) {
  constexpr int kLine = 128 / sizeof(V);
  for (int k = group.rank() * kLine; k < dim; k += group.size() * kLine) PrefetchL2(values + k);
  if (group.rank() == 0) PrefetchL2(values + dim - 1);  // the last line of an unaligned row
}

// Row `row`'s values and optimizer state asked for before its gradient is summed, so that
// the update after the sum finds them in L2 instead of waiting for memory.
template <typename Group>
__device__ void PrefetchRow(const Group& group, const SparseStepArgs& o, const SparseTableArgs& t,
                            int64_t row) {
  const int64_t first = row * t.dim;
  if (t.half == 0)
    PrefetchValues(group, t.weights + first, t.dim);
  else
    PrefetchValues(group, t.halves + first, t.dim);
  if (o.kind == kAdagrad || o.kind == kAdam) PrefetchValues(group, t.state0 + first, t.dim);
  if (o.kind == kAdam) PrefetchValues(group, t.state1 + first, t.dim);
  if (o.kind == kRowwise && group.rank() == 0) PrefetchL2(t.state0 + row);
}

// The sorted occurrences' segments: where each touched row's run starts, and its length.
struct Segments {
  const uint64_t* keys;
  const uint64_t* occurrences;  // PackOccurrence, in the keys' order
  const int64_t* begin;
  const int32_t* counts;
  const int32_t* num;
  int32_t* hot;      // the segments of more than kHotCount occurrences, listed
  int32_t* num_hot;  // zeroed before UpdateRows
};

// The row of occurrences [begin, end): its gradient summed, then the optimizer applied to
// the row once.
template <typename Group>
__device__ void UpdateRow(const Group& group, const EmbeddingBackwardArgs& a,
                          const SparseStepArgs& o, const Segments& g, int64_t begin, int64_t end,
                          int stage, bool vec4, const RowScratch& s) {
  const uint64_t key = g.keys[begin];
  const SparseTableArgs t = a.tables[key >> a.id_bits];
  const auto row = static_cast<int64_t>(key & ((uint64_t{1} << a.id_bits) - 1));
  PrefetchRow(group, o, t, row);
  SumRowGradient(group, a.d_pooled, g.occurrences, begin, end, t.dim, stage, vec4, s);
  float& rowwise_denom = s.grad[a.max_dim];
  if (o.kind == kRowwise && group.rank() == 0) {
    const float h =
        __fadd_rn(t.state0[row], __fdiv_rn(SquaredNorm(s.grad, t.dim), static_cast<float>(t.dim)));
    t.state0[row] = h;
    rowwise_denom = __fadd_rn(__fsqrt_rn(h), o.eps);
  }
  group.sync();
  const int64_t key_row = t.stochastic != 0 ? RoundingRow(t, row) : 0;
  for (int k = group.rank(); k < t.dim; k += group.size())
    UpdateElement(o, t, row, key_row, k, s.grad[k], rowwise_denom);
  group.sync();  // before the next row overwrites grad
}

// One warp per touched row of at most kHotCount occurrences, each warp of the block (its
// own scratch) striding over the rows; hotter rows are listed for UpdateHotRows (their
// order there is immaterial: each row is one block's alone). At most 64 registers a thread
// (4 blocks of the most warps an SM): 32 warps an SM, as many as blocks of one warp had.
__global__ void __launch_bounds__(kMaxBlockThreads, 4)
    UpdateRows(EmbeddingBackwardArgs a, const SparseStepArgs* step, Segments g) {
  extern __shared__ __align__(16) unsigned char shared[];
  const int warp = static_cast<int>(threadIdx.x) / kWarp;
  const int warps = static_cast<int>(blockDim.x) / kWarp;
  const RowScratch scratch =
      CarveShared(shared + warp * SharedBytes(a.max_dim, kWarp, 0), a.max_dim, kWarp);
  if (a.skip != nullptr && *a.skip != 0) return;
  const SparseStepArgs o = *step;
  const WarpGroup group;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * warps;
  for (int64_t s = static_cast<int64_t>(blockIdx.x) * warps + warp; s < *g.num; s += stride) {
    const int32_t count = g.counts[s];
    if (count > kHotCount) {
      if (group.rank() == 0) g.hot[atomicAdd(g.num_hot, 1)] = static_cast<int32_t>(s);
      continue;
    }
    const int64_t begin = g.begin[s];
    UpdateRow(group, a, o, g, begin, begin + count, 0, false, scratch);
  }
}

// One block of kHotThreads per listed hot row.
__global__ void UpdateHotRows(EmbeddingBackwardArgs a, const SparseStepArgs* step, Segments g) {
  extern __shared__ __align__(16) unsigned char shared[];
  const RowScratch scratch = CarveShared(shared, a.max_dim, kHotThreads);
  if (a.skip != nullptr && *a.skip != 0) return;
  const SparseStepArgs o = *step;
  const bool vec4 = RowsLoadAsFloat4(a);
  const BlockGroup group;
  for (int32_t h = blockIdx.x; h < *g.num_hot; h += gridDim.x) {
    const int32_t s = g.hot[h];
    const int64_t begin = g.begin[s];
    UpdateRow(group, a, o, g, begin, begin + g.counts[s], kStageFloats, vec4, scratch);
  }
}

void CheckArgs(const EmbeddingBackwardArgs& a) {
  if (a.num_features < 0 || a.num_tables < 1 || a.batch_size < 1 || a.num_ids < 0 ||
      a.max_dim < 1 || a.pooled_width < 1)
    ThrowInvalid("embedding backward: num_features ", a.num_features, ", num_tables ", a.num_tables,
                 ", batch_size ", a.batch_size, ", num_ids ", a.num_ids, ", max_dim ", a.max_dim,
                 " and pooled_width ", a.pooled_width, " must be >= 0 (tables, batch, dims >= 1)");
  if (a.id_bits < 0 || a.id_bits > kMaxIdBits)
    ThrowInvalid("embedding backward: id_bits ", a.id_bits, " is outside [0, ", kMaxIdBits, "]");
  if (a.num_ids > INT32_MAX)
    ThrowInvalid("embedding backward: num_ids ", a.num_ids, " is more than 2^31 - 1");
  // An occurrence's d_pooled offset travels in 32 bits (PackOccurrence).
  if (a.batch_size > kMaxPooledValues / a.pooled_width)
    ThrowInvalid("embedding backward: batch_size ", a.batch_size, " x pooled_width ",
                 a.pooled_width, " is more than 2^32 pooled values");
}

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
  o.step = step;
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

int32_t EmbeddingBackward::IdBitsFor(int64_t max_rows) {
  if (max_rows < 1 || max_rows > kMaxDeviceRows)
    ThrowInvalid("embedding backward: ", max_rows, " rows is outside [1, 2^", kMaxIdBits, "]");
  return BitsFor(max_rows);
}

int32_t EmbeddingBackward::MaxDim(size_t shared_bytes_per_block) {
  // The largest max_dim with both kernels' SharedBytes <= shared_bytes_per_block.
  const size_t fixed = SharedBytes(0, kHotThreads, kStageFloats) + sizeof(float);
  if (shared_bytes_per_block < fixed + 2 * sizeof(float)) return 0;
  return static_cast<int32_t>((shared_bytes_per_block - fixed) / sizeof(float)) - 1;
}

// Lets `kernel` take `bytes` of dynamic shared memory on the current device: past the
// default 48 KiB it opts in, within it it does nothing. The attribute is the process's, not
// an object's: it is only ever raised above the default, never set below it, so that no
// object's call lowers what another one's launches need.
template <typename Kernel>
void AllowShared(Kernel kernel, size_t bytes) {
  static std::mutex mu;
  static std::map<std::pair<int, const void*>, size_t> allowed;  // (device, kernel)
  int device = 0;
  CheckCuda(cudaGetDevice(&device), "cudaGetDevice");
  std::lock_guard<std::mutex> lock(mu);
  size_t& limit = allowed[{device, reinterpret_cast<const void*>(kernel)}];
  if (bytes <= std::max(limit, EmbeddingBackward::kDefaultSharedBytes)) return;
  CheckCuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 static_cast<int>(bytes)),
            "cudaFuncSetAttribute (embedding update shared memory)");
  limit = bytes;
}

EmbeddingBackward::EmbeddingBackward(int row_warps) : row_warps_(row_warps) {
  if (row_warps < 1 || row_warps > kMaxRowWarpsPerBlock)
    ThrowInvalid("embedding backward: row_warps ", row_warps, " is outside [1, ",
                 kMaxRowWarpsPerBlock, "]");
}

int EmbeddingBackward::RowWarps(int32_t max_dim) const {
  const size_t per_warp = SharedBytes(max_dim, kWarp, 0);
  return static_cast<int>(
      std::clamp<size_t>(kDefaultSharedBytes / per_warp, 1, static_cast<size_t>(row_warps_)));
}

void EmbeddingBackward::Prepare(const EmbeddingBackwardArgs& args) {
  CheckArgs(args);
  const int64_t n = args.num_ids;
  if (n == 0) return;
  for (auto* b : {&keys_, &sorted_keys_, &unique_keys_, &occurrences_, &sorted_occurrences_})
    b->Reserve(n);
  segment_begin_.Reserve(n);
  counts_.Reserve(n);
  hot_.Reserve(n / kHotCount + 1);
  num_segments_.Reserve(2);  // the segments, then the hot ones
  ReserveTemp(n, EndBit(args));
  const size_t shared = SharedBytes(args.max_dim, kHotThreads, kStageFloats);
  if (shared > shared_bytes_) {
    AllowShared(UpdateRows, RowWarps(args.max_dim) * SharedBytes(args.max_dim, kWarp, 0));
    AllowShared(UpdateHotRows, shared);
    shared_bytes_ = shared;
  }
}

int EmbeddingBackward::EndBit(const EmbeddingBackwardArgs& args) {
  // At least one bit: CUB's sort wants begin_bit < end_bit (one table of one row has none).
  return std::max(1, args.id_bits + BitsFor(args.num_tables));
}

void EmbeddingBackward::ReserveTemp(int64_t n, int end_bit) {
  size_t sort_bytes = 0, encode_bytes = 0, scan_bytes = 0;
  const int items = static_cast<int>(n);
  CheckCuda(cub::DeviceRadixSort::SortPairs(nullptr, sort_bytes, keys_.get(), sorted_keys_.get(),
                                            occurrences_.get(), sorted_occurrences_.get(), items, 0,
                                            end_bit),
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
                                            occurrences_.get(), sorted_occurrences_.get(), items, 0,
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
  Prepare(args);
  Sort(args, stream);
  Update(args, step_args, stream);
}

void EmbeddingBackward::Sort(const EmbeddingBackwardArgs& args, cudaStream_t stream) {
  const int64_t n = args.num_ids;
  if (n == 0) return;
  DLRM_INTERNAL_CHECK(keys_.size() >= static_cast<size_t>(n));  // Prepare()d
  const int64_t bags = args.num_features * args.batch_size;
  KeyOccurrences<<<GridBlocks(bags, kThreads), kThreads, 0, stream>>>(args, keys_.get(),
                                                                      occurrences_.get());
  CheckCuda(cudaGetLastError(), "embedding backward: keys");
  SortAndSegment(n, EndBit(args), stream);
}

void EmbeddingBackward::Update(const EmbeddingBackwardArgs& args, const SparseStepArgs* step_args,
                               cudaStream_t stream) {
  const int64_t n = args.num_ids;
  if (n == 0) return;
  const Segments g{sorted_keys_.get(),     sorted_occurrences_.get(), segment_begin_.get(),
                   counts_.get(),          num_segments_.get(),       hot_.get(),
                   num_segments_.get() + 1};
  CheckCuda(cudaMemsetAsync(g.num_hot, 0, sizeof(int32_t), stream), "cudaMemsetAsync");
  // Sized for the most rows there can be; each warp strides over the real count.
  const int warps = RowWarps(args.max_dim);
  const int64_t row_blocks = std::min((n + warps - 1) / warps, kMaxGridRowWarps / warps);
  UpdateRows<<<static_cast<unsigned>(row_blocks), warps * kWarp,
               warps * SharedBytes(args.max_dim, kWarp, 0), stream>>>(args, step_args, g);
  UpdateHotRows<<<static_cast<unsigned>(std::min(n / kHotCount + 1, kMaxHotBlocks)), kHotThreads,
                  SharedBytes(args.max_dim, kHotThreads, kStageFloats), stream>>>(args, step_args,
                                                                                  g);
  CheckCuda(cudaGetLastError(), "embedding backward: update");
}

}  // namespace dlrm::cuda

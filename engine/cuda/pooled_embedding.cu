#include <cuda_runtime.h>

#include "engine/core/status.h"
#include "engine/cuda/device.h"
#include "engine/cuda/pooled_embedding.h"
#include "engine/embedding/half_bits.h"
#include "engine/embedding/quantized_bits.h"

namespace dlrm::cuda {
namespace {

constexpr int kWarp = 32;
constexpr int kWarpsPerBlock = 8;

// Adds w * row (or row) into acc with a separate rounding per operation, as the CPU does.
__device__ __forceinline__ float Accumulate(float acc, float value, const float* w) {
  return w != nullptr ? __fadd_rn(acc, __fmul_rn(*w, value)) : __fadd_rn(acc, value);
}

constexpr int kUnroll = 4;  // rows whose loads are in flight together

__device__ __forceinline__ float4 Accumulate4(float4 acc, float4 v, const float* w) {
  acc.x = Accumulate(acc.x, v.x, w);
  acc.y = Accumulate(acc.y, v.y, w);
  acc.z = Accumulate(acc.z, v.z, w);
  acc.w = Accumulate(acc.w, v.w, w);
  return acc;
}

// Row id's columns [c, c + 4) (dim % 4 == 0: 16-byte aligned as floats, 8 as halves).
__device__ __forceinline__ float4 Load4(const FeatureSpec& f, int64_t id, int32_t c) {
  if (f.half == 0) return *reinterpret_cast<const float4*>(f.table + id * f.dim + c);
  const uint2 h = *reinterpret_cast<const uint2*>(f.halves + id * f.dim + c);
  const bool bf16 = f.half == 1;
  return make_float4(half_bits::Widen(static_cast<uint16_t>(h.x), bf16),
                     half_bits::Widen(static_cast<uint16_t>(h.x >> 16), bf16),
                     half_bits::Widen(static_cast<uint16_t>(h.y), bf16),
                     half_bits::Widen(static_cast<uint16_t>(h.y >> 16), bf16));
}

__device__ __forceinline__ float Load1(const FeatureSpec& f, int64_t id, int32_t c) {
  if (f.half == 0) return f.table[id * f.dim + c];
  return half_bits::Widen(f.halves[id * f.dim + c], f.half == 1);
}

// Columns [c, c + 4) of one bag, read as float4 (dim % 4 == 0). The loads of kUnroll rows
// are issued before their sums, which stay in id order.
__device__ float4 SumBagVec4(const FeatureSpec& f, const DeviceId* ids, const float* weights,
                             int64_t begin, int64_t end, int32_t c) {
  float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
  int64_t i = begin;
  for (; i + kUnroll <= end; i += kUnroll) {
    float4 v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) v[u] = Load4(f, ids[i + u], c);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
      acc = Accumulate4(acc, v[u], weights != nullptr ? weights + i + u : nullptr);
  }
  for (; i < end; ++i)
    acc = Accumulate4(acc, Load4(f, ids[i], c), weights != nullptr ? weights + i : nullptr);
  return acc;
}

// Columns [4 * lane, 4 * lane + 4) + 128 k of one bag.
__device__ void PoolBagVec4(const FeatureSpec& f, const DeviceId* ids, const float* weights,
                            int64_t begin, int64_t end, float* out, int lane) {
  for (int32_t c = 4 * lane; c < f.dim; c += 4 * kWarp) {
    float4 acc = SumBagVec4(f, ids, weights, begin, end, c);
    if (f.mean != 0 && end > begin) {
      const auto len = static_cast<float>(end - begin);
      acc.x = __fdiv_rn(acc.x, len);
      acc.y = __fdiv_rn(acc.y, len);
      acc.z = __fdiv_rn(acc.z, len);
      acc.w = __fdiv_rn(acc.w, len);
    }
    out[c] = acc.x;  // out's rows need not be 16-byte aligned
    out[c + 1] = acc.y;
    out[c + 2] = acc.z;
    out[c + 3] = acc.w;
  }
}

__device__ void PoolBagScalar(const FeatureSpec& f, const DeviceId* ids, const float* weights,
                              int64_t begin, int64_t end, float* out, int lane) {
  for (int32_t c = lane; c < f.dim; c += kWarp) {
    float acc = 0.f;
    for (int64_t i = begin; i < end; ++i)
      acc = Accumulate(acc, Load1(f, ids[i], c), weights != nullptr ? weights + i : nullptr);
    if (f.mean != 0 && end > begin) acc = __fdiv_rn(acc, static_cast<float>(end - begin));
    out[c] = acc;
  }
}

// Code k of a quantized row, as a float.
__device__ __forceinline__ float Code(const uint8_t* row, int32_t k, int32_t bits) {
  if (bits == 8) return static_cast<float>(row[k]);
  return static_cast<float>((row[k >> 1] >> ((k & 1) * 4)) & 0xF);
}

// Columns lane + 32 k of a quantized table's bag, in PoolQuantizedBag's operations and
// order (the constant, sum_j w_j * bias_j, is the same for every column).
__device__ void PoolBagQuantized(const FeatureSpec& f, const DeviceId* ids, const float* weights,
                                 int64_t begin, int64_t end, float* out, int lane) {
  const int32_t code_bytes = f.row_bytes - static_cast<int32_t>(quantized_bits::kScaleBiasBytes);
  for (int32_t c = lane; c < f.dim; c += kWarp) {
    float acc = 0.f, constant = 0.f;
    for (int64_t i = begin; i < end; ++i) {
      const uint8_t* row = f.codes + static_cast<int64_t>(ids[i]) * f.row_bytes;
      float scale, bias;
      quantized_bits::ReadScaleBias(row + code_bytes, &scale, &bias);
      const float w = weights != nullptr ? weights[i] : 1.f;
      constant = __fadd_rn(constant, __fmul_rn(w, bias));
      acc = __fadd_rn(acc, __fmul_rn(__fmul_rn(w, scale), Code(row, c, f.quant_bits)));
    }
    acc = __fadd_rn(acc, constant);
    if (f.mean != 0 && end > begin) acc = __fdiv_rn(acc, static_cast<float>(end - begin));
    out[c] = acc;
  }
}

// One warp per bag (feature f, sample b); bags are numbered feature-major like offsets.
__global__ void PooledForwardKernel(PooledForwardArgs args) {
  const int64_t bag = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarp;
  if (bag >= args.num_features * args.batch_size) return;
  const auto f = static_cast<int32_t>(bag / args.batch_size);
  const int64_t b = bag % args.batch_size;
  const FeatureSpec spec = args.features[f];
  const int lane = static_cast<int>(threadIdx.x % kWarp);
  float* out = args.out + b * args.out_width + spec.out_offset;
  const int64_t begin = args.offsets[bag], end = args.offsets[bag + 1];
  if (spec.quant_bits != 0)
    PoolBagQuantized(spec, args.ids, args.weights, begin, end, out, lane);
  else if (spec.dim % 4 == 0)  // rows start 16-byte aligned: float4 loads
    PoolBagVec4(spec, args.ids, args.weights, begin, end, out, lane);
  else
    PoolBagScalar(spec, args.ids, args.weights, begin, end, out, lane);
}

}  // namespace

void LaunchPooledForward(const PooledForwardArgs& args, void* stream) {
  if (args.num_features < 0 || args.batch_size < 0 || args.out_width < 0)
    ThrowInvalid("pooled forward: negative size (features ", args.num_features, ", batch ",
                 args.batch_size, ", width ", args.out_width, ")");
  const int64_t bags = args.num_features * args.batch_size;
  if (bags == 0) return;
  const int64_t blocks = (bags + kWarpsPerBlock - 1) / kWarpsPerBlock;
  PooledForwardKernel<<<static_cast<unsigned>(blocks), kWarpsPerBlock * kWarp, 0,
                        static_cast<cudaStream_t>(stream)>>>(args);
  CheckCuda(cudaGetLastError(), "pooled forward launch");
}

}  // namespace dlrm::cuda

#include "engine/core/status.h"
#include "engine/cuda/device.h"
#include "engine/cuda/interaction.h"

namespace dlrm::cuda {
namespace {

constexpr int kThreads = 256;

__device__ const float* Z(const float* x, const float* pooled, int i, int d) {
  return i == 0 ? x : pooled + (i - 1) * d;
}

// The shared memory of DotForward's staged copy of one sample's f + 1 vectors, each row
// padded by a float so that a warp's threads (different vectors, one column) read
// different banks.
size_t DotStageBytes(int d, int f) {
  return static_cast<size_t>(f + 1) * static_cast<size_t>(d + 1) * sizeof(float);
}
constexpr size_t kDotStageLimit = 48 * 1024;  // without opting in to more

// Where row i of the pairs starts: row i holds (i, 0) .. (i, i - 1), and (i, i) too with
// self (rows from 0; without self from 1).
__device__ __forceinline__ int RowStart(int i, int self) {
  return self ? i * (i + 1) / 2 : i * (i - 1) / 2;
}

// One block per sample: x copied, then one thread per pair (i, j), j < i (j <= i with
// self), row by row, and zeros in the row's padding up to `stride`. With `staged`, the sample's
// vectors are first copied into shared memory (rows of d + 1), so that the pairs' reads of
// scattered vectors hit shared memory, not L1; the sums are the same, in the same order.
__global__ void DotForward(const float* x, const float* pooled, int d, int f, int self, int out_dim,
                           int stride, bool staged, float* out) {
  extern __shared__ float z[];
  const int64_t r = blockIdx.x;
  const float* xr = x + r * d;
  const float* pr = pooled + r * static_cast<int64_t>(f) * d;
  float* o = out + r * stride;
  for (int k = threadIdx.x; k < d; k += blockDim.x) o[k] = xr[k];
  for (int k = out_dim + threadIdx.x; k < stride; k += blockDim.x) o[k] = 0.0f;
  int z_stride = d;
  if (staged) {
    for (int e = threadIdx.x; e < (f + 1) * d; e += blockDim.x)
      z[(e / d) * (d + 1) + e % d] = e < d ? xr[e] : pr[e - d];
    __syncthreads();
    z_stride = d + 1;
  }
  const int pairs = RowStart(f + 1, self);
  for (int p = threadIdx.x; p < pairs; p += blockDim.x) {
    int i = 1 - self;
    while (RowStart(i + 1, self) <= p) ++i;  // pair p lies in row i
    const int j = p - RowStart(i, self);
    const float* zi = staged ? z + i * z_stride : Z(xr, pr, i, d);
    const float* zj = staged ? z + j * z_stride : Z(xr, pr, j, d);
    float sum = 0.0f;
    for (int k = 0; k < d; ++k) sum = __fadd_rn(sum, __fmul_rn(zi[k], zj[k]));
    o[d + p] = sum;
  }
}

// One sample's pair gradients as coefficients of the vectors' gradients: dout's value for
// the pair holding vectors m and j (row max(m, j), column min(m, j); with self the pair
// (m, m) at j == m), read from the row's pairs `g` in place.
__device__ __forceinline__ float PairCoef(const float* g, int self, int m, int j) {
  return m >= j ? g[RowStart(m, self) + j] : g[RowStart(j, self) + m];
}

// How DotBackward runs for vectors of d: each thread carries R sums (the fewest of 1, 2, 4,
// 8 with which one pass of kThreads covers every (group of R vectors, column) of a sample,
// else 8), and the block first copies into shared memory what fits in kDotStageLimit: the
// coefficients, transposed (row j holds the coefficients of z_j for vectors 0 .. row - 1,
// zero past f, so a thread's R read as one aligned vector), then the vectors (rows of d).
struct DotBackwardPlan {
  int sums = 1;
  int coef_row = 0;  // groups of R vectors x R
  bool coefs = false, vectors = false;
  size_t bytes = 0;
  DotBackwardPlan(int d, int f) {
    const int n = f + 1;
    sums = 8;
    for (const int r : {1, 2, 4})
      if (static_cast<int64_t>((n + r - 1) / r) * d <= kThreads) {
        sums = r;
        break;
      }
    coef_row = (n + sums - 1) / sums * sums;
    const size_t coef_bytes = static_cast<size_t>(n) * coef_row * sizeof(float),
                 vector_bytes = static_cast<size_t>(n) * d * sizeof(float);
    coefs = coef_bytes <= kDotStageLimit;
    bytes = coefs ? coef_bytes : 0;
    vectors = bytes + vector_bytes <= kDotStageLimit;
    if (vectors) bytes += vector_bytes;
  }
};

// c[0, R) = the staged coefficients of z_j for vectors m0 .. m0 + R - 1 (`from`, aligned to
// R floats), in as few loads as their alignment allows.
template <int R>
__device__ __forceinline__ void LoadCoefs(const float* from, float* c) {
  if constexpr (R % 4 == 0) {
#pragma unroll
    for (int q = 0; q < R / 4; ++q) {
      const float4 v = reinterpret_cast<const float4*>(from)[q];
      c[4 * q] = v.x, c[4 * q + 1] = v.y, c[4 * q + 2] = v.z, c[4 * q + 3] = v.w;
    }
  } else if constexpr (R == 2) {
    const float2 v = *reinterpret_cast<const float2*>(from);
    c[0] = v.x, c[1] = v.y;
  } else {
    c[0] = *from;
  }
}

// One block per sample; a thread owns column k of R vectors m0 .. m0 + R - 1 at once (R
// independent sums, so a thread has R adds in flight and reads each vector's k-th value
// once for all R). dz_m[k] = the sum over j ascending of coef(m, j) * z_j[k], which is the
// forward's pair order: (m, 0) .. (m, m - 1), then with self (m, m) (whose coefficient
// counts twice: d<z, z> = 2z), then (m + 1, m) .. (f, m); dx's sum starts from dout's x
// part. What `plan` stages is read from shared memory; the sums are the same either way.
template <int R>
__global__ void DotBackward(const float* x, const float* pooled, const float* dout, int d, int f,
                            int self, int stride, DotBackwardPlan plan, float* dx, float* dpooled) {
  extern __shared__ float4 shared_space[];  // float4: LoadCoefs' alignment
  float* coefs = reinterpret_cast<float*>(shared_space);
  const int64_t s = blockIdx.x;
  const int n = f + 1, row = plan.coef_row;
  const float* xr = x + s * d;
  const float* pr = pooled + s * static_cast<int64_t>(f) * d;
  const float* g = dout + s * stride + d;
  float* z = coefs + (plan.coefs ? n * row : 0);
  if (plan.coefs)
    for (int e = threadIdx.x; e < n * row; e += blockDim.x) {
      const int j = e / row, m = e % row;
      coefs[e] = m < n && (j != m || self) ? PairCoef(g, self, m, j) : 0.0f;
    }
  if (plan.vectors)
    for (int e = threadIdx.x; e < n * d; e += blockDim.x) z[e] = e < d ? xr[e] : pr[e - d];
  __syncthreads();
  for (int t = threadIdx.x; t < row / R * d; t += blockDim.x) {
    const int k = t % d, m0 = (t / d) * R;
    float acc[R];
#pragma unroll
    for (int r = 0; r < R; ++r) acc[r] = m0 + r == 0 ? dout[s * stride + k] : 0.0f;
    for (int j = 0; j < n; ++j) {
      const float zj = plan.vectors ? z[j * d + k] : Z(xr, pr, j, d)[k];
      float c[R];
      if (plan.coefs)
        LoadCoefs<R>(coefs + j * row + m0, c);
      else
#pragma unroll
        for (int r = 0; r < R; ++r)
          c[r] = m0 + r < n && (j != m0 + r || self) ? PairCoef(g, self, m0 + r, j) : 0.0f;
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const int m = m0 + r;
        if (m >= n || (j == m && !self)) continue;
        acc[r] = __fadd_rn(acc[r], __fmul_rn(j == m ? __fadd_rn(c[r], c[r]) : c[r], zj));
      }
    }
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const int m = m0 + r;
      if (m == 0)
        dx[s * d + k] = acc[r];
      else if (m < n)
        dpooled[s * static_cast<int64_t>(f) * d + (m - 1) * d + k] = acc[r];
    }
  }
}

// CAT: out = [x, pooled], then zeros up to `stride`.
__global__ void CatForward(const float* x, const float* pooled, int d, int pw, int out_dim,
                           int stride, float* out) {
  const int64_t r = blockIdx.x;
  for (int k = threadIdx.x; k < stride; k += blockDim.x)
    out[r * stride + k] = k < d ? x[r * d + k] : k < out_dim ? pooled[r * pw + (k - d)] : 0.0f;
}

// CAT's backward: dout split into dx and dpooled.
__global__ void CatBackward(const float* dout, int d, int pw, int out_dim, int stride, float* dx,
                            float* dpooled) {
  const int64_t r = blockIdx.x;
  for (int k = threadIdx.x; k < out_dim; k += blockDim.x) {
    if (k < d)
      dx[r * d + k] = dout[r * stride + k];
    else
      dpooled[r * pw + (k - d)] = dout[r * stride + k];
  }
}

__global__ void BcePerSample(const float* logits, const float* labels, int64_t n, float grad_scale,
                             float* dlogits, double* losses) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const double z = logits[i], y = labels[i];
  const double e = exp(-fabs(z));
  losses[i] = fmax(z, 0.0) - z * y + log1p(e);
  const double sigmoid_abs = 1.0 / (1.0 + e), sigmoid_neg_abs = e / (1.0 + e);
  const double sz = z >= 0 ? sigmoid_abs : sigmoid_neg_abs;
  const double smz = z >= 0 ? sigmoid_neg_abs : sigmoid_abs;
  dlogits[i] = static_cast<float>(((1.0 - y) * sz - y * smz) * static_cast<double>(grad_scale));
}

// One block: each thread sums a strided slice in order, then a fixed tree over threads.
__global__ void SumInTree(const double* v, int64_t n, double* out) {
  __shared__ double partial[kThreads];
  double sum = 0.0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) sum += v[i];
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (int half = kThreads / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) partial[threadIdx.x] += partial[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) *out = partial[0];
}

void CheckShape(const InteractionShape& s, int64_t n) {
  if (s.bottom_dim < 1 || s.num_features < 0 || s.pooled_width < 0 || n < 0)
    ThrowInvalid("interaction: bottom_dim ", s.bottom_dim, ", num_features ", s.num_features,
                 ", pooled_width ", s.pooled_width, " and n ", n,
                 " must be >= 0 (bottom_dim >= 1)");
  if (s.dot && s.pooled_width != s.num_features * s.bottom_dim)
    ThrowInvalid("interaction DOT: pooled_width ", s.pooled_width, " is not num_features ",
                 s.num_features, " x bottom_dim ", s.bottom_dim);
  if (!s.dot && s.self_interaction) ThrowInvalid("interaction CAT: self_interaction is DOT's");
  if (s.stride != 0 && s.stride < s.out_dim())
    ThrowInvalid("interaction: stride ", s.stride, " is less than out_dim ", s.out_dim());
  if (n > INT32_MAX) ThrowInvalid("interaction: n=", n, " is more than 2^31 - 1 blocks");
}

void LaunchDotBackward(const InteractionShape& s, const float* x, const float* pooled,
                       const float* dout, unsigned blocks, float* dx, float* dpooled,
                       cudaStream_t stream) {
  const int d = s.bottom_dim, f = s.num_features, self = s.self_interaction ? 1 : 0;
  const DotBackwardPlan plan(d, f);
  const auto launch = [&](auto kernel) {
    kernel<<<blocks, kThreads, plan.bytes, stream>>>(x, pooled, dout, d, f, self, s.row_stride(),
                                                     plan, dx, dpooled);
  };
  switch (plan.sums) {
    case 1: return launch(DotBackward<1>);
    case 2: return launch(DotBackward<2>);
    case 4: return launch(DotBackward<4>);
    default: return launch(DotBackward<8>);
  }
}

}  // namespace

void LaunchInteractionForward(const InteractionShape& s, const float* x, const float* pooled,
                              int64_t n, float* out, cudaStream_t stream) {
  CheckShape(s, n);
  if (n == 0) return;
  const auto blocks = static_cast<unsigned>(n);
  if (s.dot) {
    const size_t stage = DotStageBytes(s.bottom_dim, s.num_features);
    const bool staged = stage <= kDotStageLimit;
    DotForward<<<blocks, kThreads, staged ? stage : 0, stream>>>(
        x, pooled, s.bottom_dim, s.num_features, s.self_interaction ? 1 : 0, s.out_dim(),
        s.row_stride(), staged, out);
  } else
    CatForward<<<blocks, kThreads, 0, stream>>>(x, pooled, s.bottom_dim, s.pooled_width,
                                                s.out_dim(), s.row_stride(), out);
  CheckCuda(cudaGetLastError(), "interaction forward");
}

void LaunchInteractionBackward(const InteractionShape& s, const float* x, const float* pooled,
                               const float* dout, int64_t n, float* dx, float* dpooled,
                               cudaStream_t stream) {
  CheckShape(s, n);
  if (n == 0) return;
  const auto blocks = static_cast<unsigned>(n);
  if (s.dot)
    LaunchDotBackward(s, x, pooled, dout, blocks, dx, dpooled, stream);
  else
    CatBackward<<<blocks, kThreads, 0, stream>>>(dout, s.bottom_dim, s.pooled_width, s.out_dim(),
                                                 s.row_stride(), dx, dpooled);
  CheckCuda(cudaGetLastError(), "interaction backward");
}

void LaunchBceWithLogits(const float* logits, const float* labels, int64_t n, float grad_scale,
                         float* dlogits, double* losses, double* loss_sum, cudaStream_t stream) {
  if (n < 1) ThrowInvalid("BCE: n must be >= 1, got ", n);
  const unsigned blocks = GridBlocks(n, kThreads);
  BcePerSample<<<blocks, kThreads, 0, stream>>>(logits, labels, n, grad_scale, dlogits, losses);
  SumInTree<<<1, kThreads, 0, stream>>>(losses, n, loss_sum);
  CheckCuda(cudaGetLastError(), "BCE kernels");
}

}  // namespace dlrm::cuda

#include <cmath>

#include "engine/core/status.h"
#include "engine/cuda/dense_optimizer.h"
#include "engine/cuda/device.h"

namespace dlrm::cuda {
namespace {

constexpr int kThreads = 256;

// Every kernel returns at once when *skip (if given) is nonzero: the step diverged.
__device__ bool Skipped(const int32_t* skip) { return skip != nullptr && *skip != 0; }

__global__ void SgdKernel(float* p, const float* grad, float* buf, int64_t n,
                          const DenseStepArgs* args, const int32_t* skip) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n || Skipped(skip)) return;
  const DenseStepArgs a = *args;
  float g = grad[i];
  if (a.weight_decay != 0.0f) g = __fadd_rn(g, __fmul_rn(a.weight_decay, p[i]));
  if (buf != nullptr) {
    const float b = __fadd_rn(__fmul_rn(a.momentum, buf[i]), g);
    buf[i] = b;
    g = a.nesterov ? __fadd_rn(g, __fmul_rn(a.momentum, b)) : b;
  }
  p[i] = __fsub_rn(p[i], __fmul_rn(a.lr, g));
}

__global__ void AdagradKernel(float* p, const float* grad, float* sum_sq, int64_t n,
                              const DenseStepArgs* args, const int32_t* skip) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n || Skipped(skip)) return;
  const DenseStepArgs a = *args;
  float g = grad[i];
  if (a.weight_decay != 0.0f) g = __fadd_rn(g, __fmul_rn(a.weight_decay, p[i]));
  const float s = __fadd_rn(sum_sq[i], __fmul_rn(g, g));
  sum_sq[i] = s;
  p[i] = __fsub_rn(p[i], __fdiv_rn(__fmul_rn(a.lr, g), __fadd_rn(__fsqrt_rn(s), a.eps)));
}

__global__ void AdamKernel(float* p, const float* grad, float* m, float* v, int64_t n,
                           const DenseStepArgs* args, const int32_t* skip) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n || Skipped(skip)) return;
  const DenseStepArgs a = *args;
  float param = p[i];
  if (a.decoupled) param = __fmul_rn(param, a.decay_factor);
  const float g = a.l2_decay != 0.0f ? __fadd_rn(grad[i], __fmul_rn(a.l2_decay, param)) : grad[i];
  const float mi = __fadd_rn(__fmul_rn(a.beta1, m[i]), __fmul_rn(__fsub_rn(1.0f, a.beta1), g));
  const float vi =
      __fadd_rn(__fmul_rn(a.beta2, v[i]), __fmul_rn(__fmul_rn(__fsub_rn(1.0f, a.beta2), g), g));
  m[i] = mi;
  v[i] = vi;
  const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), a.bias_correction2_sqrt), a.eps);
  p[i] = __fsub_rn(param, __fdiv_rn(__fmul_rn(a.step_size, mi), denom));
}

// Adam's per-step scalars, computed as the CPU's (optim/dense_optimizer.cc).
void SetAdamArgs(const config::AdamConfig& c, float lr, int64_t step, DenseStepArgs* a) {
  const double t = static_cast<double>(step);
  const double bias_correction1 = 1.0 - std::pow(static_cast<double>(c.beta1()), t);
  const double bias_correction2 = 1.0 - std::pow(static_cast<double>(c.beta2()), t);
  a->step_size = static_cast<float>(lr / bias_correction1);
  a->bias_correction2_sqrt = static_cast<float>(std::sqrt(bias_correction2));
  a->decay_factor = static_cast<float>(1.0 - static_cast<double>(lr) * c.weight_decay());
  a->beta1 = c.beta1();
  a->beta2 = c.beta2();
  a->eps = c.eps();
  a->decoupled = c.weight_decay() != 0.0f && c.decoupled_weight_decay();
  a->l2_decay = c.decoupled_weight_decay() ? 0.0f : c.weight_decay();
}

unsigned Blocks(int64_t n) { return GridBlocks(n, kThreads); }

}  // namespace

int DenseOptimizerStateCount(const config::DenseOptimizerConfig& config) {
  switch (config.kind_case()) {
    case config::DenseOptimizerConfig::kAdagrad: return 1;
    case config::DenseOptimizerConfig::kAdam: return 2;
    default: return config.sgd().momentum() != 0.0f ? 1 : 0;
  }
}

DenseStepArgs MakeDenseStepArgs(const config::DenseOptimizerConfig& config, float lr,
                                int64_t step) {
  if (step < 1) ThrowInvalid("dense optimizer: step must be >= 1, got ", step);
  DenseStepArgs a;
  a.lr = lr;
  switch (config.kind_case()) {
    case config::DenseOptimizerConfig::kAdagrad:
      a.eps = config.adagrad().eps();
      a.weight_decay = config.adagrad().weight_decay();
      break;
    case config::DenseOptimizerConfig::kAdam: SetAdamArgs(config.adam(), lr, step, &a); break;
    default:
      a.momentum = config.sgd().momentum();
      a.weight_decay = config.sgd().weight_decay();
      a.nesterov = config.sgd().nesterov() ? 1 : 0;
  }
  return a;
}

void LaunchDenseUpdate(const config::DenseOptimizerConfig& config, float* params,
                       const float* grads, const std::vector<float*>& state, int64_t n,
                       const DenseStepArgs* args, const int32_t* skip, cudaStream_t stream) {
  if (n < 0) ThrowInvalid("LaunchDenseUpdate: n must be >= 0, got ", n);
  const int want = DenseOptimizerStateCount(config);
  if (static_cast<int>(state.size()) != want)
    ThrowInvalid("LaunchDenseUpdate: ", state.size(), " state buffers given, the optimizer keeps ",
                 want);
  if (n == 0) return;
  switch (config.kind_case()) {
    case config::DenseOptimizerConfig::kAdagrad:
      AdagradKernel<<<Blocks(n), kThreads, 0, stream>>>(params, grads, state[0], n, args, skip);
      break;
    case config::DenseOptimizerConfig::kAdam:
      AdamKernel<<<Blocks(n), kThreads, 0, stream>>>(params, grads, state[0], state[1], n, args,
                                                     skip);
      break;
    default:
      SgdKernel<<<Blocks(n), kThreads, 0, stream>>>(params, grads, want ? state[0] : nullptr, n,
                                                    args, skip);
  }
  CheckCuda(cudaGetLastError(), "dense optimizer kernel");
}

}  // namespace dlrm::cuda

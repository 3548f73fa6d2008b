// The dense optimizers (engine/optim/dense_optimizer.h) as one element-wise kernel each on
// a CUDA device: SGD (momentum, Nesterov, weight decay), Adagrad, Adam and AdamW.
//
// Bits: every element does the CPU loop's floating-point operations in its order, with
// separate correctly rounded multiply, add, divide and square root (no FMA contraction;
// the CPU builds for baseline x86-64, which has no FMA either), and the per-step scalars
// (Adam's bias corrections) are computed on the host exactly as the CPU computes them. So
// parameters and state equal the CPU's bit for bit (tested on a device).
//
// State: the buffers the CPU optimizer names in StateBuffers(), in that order, each
// [num_params] on the device: SGD with momentum {momentum}, Adagrad {sum_sq}, Adam
// {exp_avg, exp_avg_sq}; SGD without momentum none. The caller initialises them as the CPU
// does (zeros; Adagrad's initial_accumulator) or copies them from the host.
//
// Memory: device pointers borrowed for the launch. Thread safety: ordered by `stream`.
// Errors: kInvalidArgument for a step < 1, a wrong number of state buffers or n < 0.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "engine/config/dlrm.pb.h"

namespace dlrm::cuda {

// How many state buffers `config`'s optimizer keeps (0, 1 or 2).
int DenseOptimizerStateCount(const config::DenseOptimizerConfig& config);

// params[i] -= the optimizer's step on grads[i] for i in [0, n), step >= 1 (1-based).
void LaunchDenseUpdate(const config::DenseOptimizerConfig& config, float* params,
                       const float* grads, const std::vector<float*>& state, int64_t n, float lr,
                       int64_t step, cudaStream_t stream);

}  // namespace dlrm::cuda

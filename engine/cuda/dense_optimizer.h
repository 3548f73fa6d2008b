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
// Per-step scalars (the learning rate, Adam's bias corrections) are read from device
// memory, not passed by value, so that a captured CUDA graph replays any step: the caller
// writes MakeDenseStepArgs' result there before the launch (or the graph's replay).
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

// The scalars of one step of any dense optimizer, as the CPU computes them.
struct DenseStepArgs {
  float lr = 0, momentum = 0, weight_decay = 0, eps = 0;
  float step_size = 0, bias_correction2_sqrt = 1, decay_factor = 1, beta1 = 0, beta2 = 0,
        l2_decay = 0;  // Adam
  int32_t nesterov = 0, decoupled = 0;
};
// `config`'s scalars at learning rate `lr` and 1-based `step` (kInvalidArgument if < 1).
DenseStepArgs MakeDenseStepArgs(const config::DenseOptimizerConfig& config, float lr, int64_t step);

// params[i] -= the optimizer's step on grads[i] for i in [0, n), with the scalars at
// `args` (device memory), unless `skip` (device memory, or null) holds a nonzero value
// when the kernel runs: then nothing changes.
void LaunchDenseUpdate(const config::DenseOptimizerConfig& config, float* params,
                       const float* grads, const std::vector<float*>& state, int64_t n,
                       const DenseStepArgs* args, const int32_t* skip, cudaStream_t stream);

}  // namespace dlrm::cuda

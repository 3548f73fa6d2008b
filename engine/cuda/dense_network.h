// A DLRM's network above the embedding tables on a CUDA device, the CPU model's
// definition and parameter layout (engine/model/dlrm_model.h): every feature's bags pooled
// in one launch from the tables the caller describes, the bottom MLP, the interaction, the
// cross network of a DCN model, the top MLP and BCE; and the whole backward from the loss
// into one dense gradient (the CPU's layout) and the gradient w.r.t. the pooled
// embeddings. Both device backends run it: the Engine's (backend.h, tables on the device)
// and a data-parallel trainer's (trainer_backend.h, the step's fetched rows copied in).
//
// Bits: every kernel and GEMM is deterministic (linear.h, interaction.h, cross_net.h), so
// a step repeats bitwise run to run and agrees with the CPU within fp32 rounding.
// Layout: where the interaction feeds the top MLP directly and its width is not a multiple
// of 4 floats (DOT's 64 + 351 = 415), its rows are padded with zeros to the next multiple
// (HugeCTR does the same) and the first top layer multiplies a copy of its weights with
// zero columns at the same stride, refreshed from the parameters each forward; its weight
// gradient is formed padded and copied into the dense gradient without the padding. The
// products of the zero columns add nothing; what it buys is rows cuBLASLt can load as
// 16-byte vectors (cuda_linear_bench measures the two widths).
// Memory: parameters, batches and gradients are device memory borrowed for a call; the
// activations and gradient buffers are the caller's, grown only, so calls of one batch
// shape allocate nothing once warm (what a CUDA graph needs).
// Threading: one thread (the owner's stream) at a time. Errors: kInvalidArgument for bad
// shapes, kInternal naming a failing CUDA call; cuBLASLt missing is kFailedPrecondition.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "engine/config/dlrm.pb.h"
#include "engine/cuda/batch_staging.h"
#include "engine/cuda/cross_net.h"
#include "engine/cuda/device_buffer.h"
#include "engine/cuda/interaction.h"
#include "engine/cuda/linear.h"
#include "engine/cuda/pooled_embedding.h"
#include "engine/model/dlrm_model.h"

namespace dlrm::cuda {

// device.matmul_precision as the GEMMs' setting.
MatmulPrecision PrecisionOf(const config::DeviceConfig& device);

// The forward's outputs of one batch.
struct DenseActivations {
  DeviceBuffer<float> pooled, inter;
  std::vector<DeviceBuffer<float>> bottom, top;
  CrossActivations cross;  // a DCN model's
  // The top MLP's input, as the forward decided: inter, or the cross network's output.
  const float* top_in = nullptr;
};

// The backward's buffers: the loss, its gradients and scratch.
struct DenseGradients {
  DeviceBuffer<float> dlogits, d_inter, d_cross, d_bottom, d_pooled, scratch_a, scratch_b;
  DeviceBuffer<double> losses, loss_sum;  // loss_sum [1]: the batch's BCE summed
};

class DenseNetwork {
 public:
  // model: the host model whose shape and parameter layout this follows (borrowed; its
  // parameters are not read). Opens cuBLASLt on `stream`.
  DenseNetwork(const DlrmModel<float>& model, cudaStream_t stream, MatmulPrecision precision);

  // The logits [batch_size] of `in` (a.pooled, the layers' outputs kept for Backward).
  // features: the model's sparse features, [feature_bindings().size()] device specs; null
  // when a.pooled already holds the batch's pooled rows [batch_size x pooled_width] (pooled
  // by the embeddings' owners, train/model_parallel_trainer.h).
  const float* Forward(const float* params, const FeatureSpec* features, const DeviceBatch& in,
                       DenseActivations& a);
  // The backward of Forward's batch from BCE (dlogits scaled by grad_scale): g.loss_sum,
  // dense_grad [dense_params] and g.d_pooled [batch_size x pooled_width], overwritten.
  void Backward(const float* params, const DeviceBatch& in, float grad_scale,
                const DenseActivations& a, DenseGradients& g, float* dense_grad);

 private:
  // a.pooled: the bags of `in` pooled (features null: left as the caller filled it).
  void Pool(const FeatureSpec* features, const DeviceBatch& in, DenseActivations& a);
  InteractionShape Shape() const;
  const float* TopInput(const float* params, DenseActivations& a, int64_t n);
  // `padded`: the MLP's first layer reads rows of top_pad_.stride (the top MLP's, when
  // top_pad_.padded()).
  const float* MlpForward(const Mlp<float>& mlp, const float* params, const float* x, int64_t n,
                          std::vector<DeviceBuffer<float>>& acts, bool padded = false);
  // dy: the gradient w.r.t. the MLP's output (overwritten); dx: w.r.t. its input, or null.
  // A padded first layer multiplies the weights the last Forward copied (the step's own:
  // Backward follows its Forward on the stream, with the same params).
  void MlpBackward(const Mlp<float>& mlp, const float* params, const float* x,
                   const std::vector<DeviceBuffer<float>>& acts, float* dy, int64_t n, float* dx,
                   DenseGradients& g, float* dense_grad, bool padded = false);
  // top_pad_.weights' first `width` columns = the first top layer's weights in params.
  void RefreshPaddedWeights(const float* params);

  // The first top layer's padded operands (see Layout above).
  struct PaddedLayer {
    int width = 0, stride = 0;        // its input's columns, and its rows' stride
    DeviceBuffer<float> weights;      // [out x stride], zero past width
    DeviceBuffer<float> weight_grad;  // [out x stride], the GEMM's; copied back to width
    bool padded() const { return stride != width; }
  };

  const DlrmModel<float>& model_;
  const cudaStream_t stream_;
  LinearContext linear_;
  std::unique_ptr<DeviceCrossNet> cross_;  // null unless the model is DCN
  PaddedLayer top_pad_;
};

}  // namespace dlrm::cuda

// The device side of a trainer's step (data_parallel_trainer.h, model_parallel_trainer.h):
// the dense network's forward and backward over this rank's part of a global batch, whose
// embedding rows the trainer fetched from their owners (or whose pooled embeddings the
// owners sent), and prediction over such rows. Everything
// else of the trainer's step stays on the host, written once for every device: the
// lookups, the one exchange of the ranks' contributions, the fixed-tree sums, the
// divergence checks and the dense optimizer's update of the host model's parameters. So
// every rank holds the same parameter bits whatever its device, and checkpoints read the
// host copy as they do for a CPU trainer.
//
// Bits: the CPU backend's gradient is the part's subtree of the global batch's reduction
// tree (a job equals one process bitwise); a device's is its own fixed-order sum over the
// part (a job repeats bitwise run to run and agrees with the CPU within rounding).
//
// Ownership: a backend borrows the model (the host copy of the dense parameters) and the
// pool it was made with; both outlive it. A device backend copies the parameters in before
// its next call once told they changed (ParametersChanged).
// Threading: one call at a time (the trainer's thread).
// Errors: kInvalidArgument for rows that do not match the model's tables; kFailedPrecondition
// where the device cannot be used (made by the factory); device errors kInternal naming
// the call.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/collective/communicator.h"
#include "engine/config/dlrm.pb.h"
#include "engine/core/thread_pool.h"
#include "engine/data/batch.h"
#include "engine/embedding/embedding_table.h"
#include "engine/model/dlrm_model.h"
#include "engine/train/owned_shards.h"

namespace dlrm::train {

class TrainerBackend {
 public:
  virtual ~TrainerBackend() = default;

  // "cpu", "cuda:0": for messages.
  virtual std::string name() const = 0;

  // The part's forward and backward. Its ids index `rows` (one table per model table, FP32,
  // read only). dense_grad (resized to the dense parameters) receives the part's gradient
  // of the global batch's mean loss, d_pooled (resized to batch_size x pooled_width) the
  // gradient of that loss w.r.t. the part's pooled embeddings. Returns the part's loss sum.
  virtual double ForwardBackward(const ValidatedBatch& part, int64_t global_batch,
                                 std::vector<EmbeddingTable<float>>& rows,
                                 std::vector<float>* dense_grad, std::vector<float>* d_pooled) = 0;

  // logits [batch_size] of a batch whose ids index `rows`.
  virtual void PredictLogits(const ValidatedBatch& batch, std::vector<EmbeddingTable<float>>& rows,
                             float* logits) = 0;

  // The same two with the embeddings already pooled by their owners (the trainers that own
  // the shards, model_parallel_trainer.h): pooled [batch_size x pooled_width] on the host,
  // in the model's column order; the part's ids are not read.
  virtual double ForwardBackwardPooled(const ValidatedBatch& part, int64_t global_batch,
                                       const float* pooled, std::vector<float>* dense_grad,
                                       std::vector<float>* d_pooled) = 0;
  virtual void PredictLogitsPooled(const ValidatedBatch& batch, const float* pooled,
                                   float* logits) = 0;

  // The host model's dense parameters changed (an update, a restore): a device copies
  // them in before its next call. No-op for the CPU.
  virtual void ParametersChanged() = 0;
};

// Computes on the host model itself, with `pool`.
std::unique_ptr<TrainerBackend> MakeCpuTrainerBackend(DlrmModel<float>* model, ThreadPool* pool);

// Makes the backend of config.device() for a trainer's model. The layer that knows the
// devices provides it (engine/device_backends.h); a trainer given none computes on the CPU
// and refuses any other device by name, never computing on the CPU behind a CUDA config.
using TrainerBackendFactory = std::function<std::unique_ptr<TrainerBackend>(
    const config::DlrmConfig& config, DlrmModel<float>* model, ThreadPool* pool)>;

// Makes the trainers' communicator over device memory (DLRM_COLLECTIVE=nccl) for
// config.device(), bootstrapped over `bootstrap` (the built-in one: NCCL's unique id
// travels over it). Collective over bootstrap's ranks.
using DeviceCommunicatorFactory = std::function<std::unique_ptr<collective::Communicator>(
    std::unique_ptr<collective::Communicator> bootstrap, const config::DlrmConfig& config)>;

// What the layer that knows the devices gives a trainer (engine/device_backends.h); a
// member left empty refuses what needs it, naming it.
struct TrainerDevices {
  TrainerBackendFactory backend;
  DeviceCommunicatorFactory communicator;
  OwnedShardsFactory owned;  // a trainer that owns table shards (the Neo layout)
};

// factory's backend for config.device(); with no factory, the CPU's for kind CPU and
// kFailedPrecondition naming device.kind for any other.
std::unique_ptr<TrainerBackend> MakeTrainerBackend(const TrainerBackendFactory& factory,
                                                   const config::DlrmConfig& config,
                                                   DlrmModel<float>* model, ThreadPool* pool);

}  // namespace dlrm::train

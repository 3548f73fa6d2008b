// What a trainer of a multi-process job is to the job's host (trainer_role.h, the C ABI's
// dlrm_trainer_*, `dlrm train`): one rank's queue of parts and its steps, whichever layout
// holds the embeddings. Two implementations:
//   DataParallelTrainer   embeddings on servers (PERSIA / parameter-server layout);
//   ModelParallelTrainer  embeddings on the trainers themselves (Neo / TorchRec layout).
// Both keep the same dense parameters on every rank, bitwise, and in sync mode equal the
// single-process Engine bitwise.
//
// Threading: one call at a time. TrainStep and AppendPredictions are collective over the
// trainers (every rank calls them in the same sequence). Errors: as the implementations.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/data/batch.h"
#include "engine/model/dlrm_model.h"
#include "engine/optim/dense_optimizer.h"
#include "engine/ps/shard_store.h"

namespace dlrm::train {

// Payload bytes a trainer's training steps sent and received (without message headers;
// evaluation and prediction are not counted).
struct WireBytes {
  int64_t steps = 0;
  int64_t sent = 0;
  int64_t received = 0;
};

class SyncTrainer {
 public:
  virtual ~SyncTrainer() = default;

  // Queues this rank's part of the next global batch (copied). A bad part is not an error
  // here: it fails its step, on every rank alike.
  virtual void Enqueue(const BatchView& part) = 0;
  // Trains the oldest queued part; returns the global batch's mean loss, the same on
  // every rank. kFailedPrecondition if nothing is queued; a failed step drops its part.
  virtual float TrainStep() = 0;
  // Enqueue(part) then TrainStep(); kFailedPrecondition if other parts are queued.
  virtual float TrainStep(const BatchView& part) = 0;
  virtual size_t queued() const = 0;
  virtual int64_t step() const = 0;
  // Waits until every update so far is applied where the embeddings live.
  virtual void Flush() = 0;
  // The click probabilities and labels of batches first, first + stride, ... appended,
  // with every update so far applied. Every rank passes the same batches; rank r of W
  // passes first = r, stride = W.
  virtual void AppendPredictions(const std::vector<BatchView>& batches, size_t first, size_t stride,
                                 std::vector<double>* probabilities,
                                 std::vector<float>* labels) = 0;

  virtual const WireBytes& wire_bytes() const = 0;
  virtual const DlrmModel<float>& model() const = 0;
  // "cpu", "cuda:0": where the dense forward and backward run.
  virtual std::string device() const = 0;

  // For checkpoints: the dense state, the replicated tables, the step to resume from
  // (kFailedPrecondition while parts are queued). mutable_model: the caller may change the
  // parameters (a device copies them in again).
  virtual DlrmModel<float>& mutable_model() = 0;
  virtual DenseOptimizer<float>& dense_optimizer() = 0;
  virtual const ps::EmbeddingShardStore& replicas() const = 0;
  virtual ps::EmbeddingShardStore& mutable_replicas() = 0;
  virtual void set_step(int64_t step) = 0;

 protected:
  // set_step's refusals, the same for both: kFailedPrecondition while parts are queued
  // (they would train at other steps), kInvalidArgument for a negative step. `who` starts
  // the message ("sync trainer").
  static void CheckSetStep(const char* who, size_t queued, int64_t step) {
    if (queued > 0)
      Throw(StatusCode::kFailedPrecondition, who, ": set_step with ", queued, " parts queued");
    if (step < 0) ThrowInvalid(who, ": step must be >= 0, got ", step);
  }
};

}  // namespace dlrm::train

// A trainer of data-parallel training with sharded embeddings (Neo's model-parallel
// embeddings + data-parallel MLPs). The dense model is always updated synchronously; the
// embeddings follow the owners' staleness bound (sync: bitwise equal to one process;
// hybrid: PERSIA's bounded-stale lookups, see shard_owner.h).
//
// Every rank holds the dense model; rank k trains on the k-th run of samples of each global
// batch (all runs the same size, a power-of-two number of reduction chunks). A step:
//  1. waits for the rows of the part's distinct ids, fetched from their owners (servers,
//     or the local replicas of DATA_PARALLEL tables), and pools them as one process would;
//  2. runs the dense forward/backward over its chunks: its dense gradient is a subtree of
//     the global batch's reduction tree;
//  3. exchanges, in ONE all-gather, each rank's readiness (or why its part is bad), loss,
//     gradient subtree and replica-table update; every rank finishes the tree (same bits
//     everywhere) and applies the dense optimizer and the replicas' update;
//  4. sends each server its features' bags and pooled gradients.
// One collective per step matters: with network latency, each round trip is a step cost.
//
// Pipelining: Enqueue starts a part's lookups at once, so the lookups of the next queued
// steps travel while the current step computes. In sync mode the owners hold those
// lookups until the step before them is applied; in hybrid mode they are answered at once
// (within the bound), which is where hybrid's speed comes from.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "engine/collective/communicator.h"
#include "engine/config/dlrm.pb.h"
#include "engine/core/metrics.h"
#include "engine/core/thread_pool.h"
#include "engine/data/batch.h"
#include "engine/model/dlrm_model.h"
#include "engine/optim/dense_optimizer.h"
#include "engine/ps/service.h"
#include "engine/ps/shard_store.h"
#include "engine/shard/plan.pb.h"
#include "engine/train/dense_exchange.h"
#include "engine/train/sync_trainer.h"
#include "engine/train/trainer_backend.h"

namespace dlrm::train {

class DataParallelTrainer : public SyncTrainer {
 public:
  // Borrows comm, service and pool. config must pass ValidateConfig; plan must be the
  // plan every rank and server uses. make_backend makes the device side of the step for
  // config.device() (trainer_backend.h; none: the CPU, and any other device refused).
  DataParallelTrainer(const config::DlrmConfig& config, const shard::ShardingPlan& plan,
                      collective::Communicator* comm, ps::EmbeddingService* service,
                      ThreadPool* pool, const TrainerBackendFactory& make_backend = nullptr);
  ~DataParallelTrainer() override;

  // Queues this rank's part of the next global batch and starts its row lookups. The part
  // is copied. A bad part is not an error here: it fails its step, on every rank alike.
  void Enqueue(const BatchView& part) override;
  // Collective over the communicator's ranks: trains the oldest queued part and returns
  // the global batch's mean loss (the same on every rank). kFailedPrecondition if nothing
  // is queued. A bad part, one of another size than the other ranks', or a failed lookup
  // fails the step on every rank with the same error before anything changes; that part
  // is dropped and the later ones stay queued.
  float TrainStep() override;
  // Enqueue(part) then TrainStep(); kFailedPrecondition if other parts are queued.
  float TrainStep(const BatchView& part) override;
  size_t queued() const override { return queue_.size(); }

  // Waits until every owner has applied every update so far (hybrid mode lags).
  void Flush() override;
  // logits [batch_size] with every update so far applied (Flush first). Not collective.
  void PredictLogits(const BatchView& batch, float* logits);
  // Log loss and AUC over labelled batches, with every update so far applied.
  EvalResult Evaluate(const std::vector<BatchView>& batches);
  // The click probabilities and labels of batches first, first + stride, ... (every
  // update so far applied), appended: Evaluate's work, which trainers of a job share out.
  void AppendPredictions(const std::vector<BatchView>& batches, size_t first, size_t stride,
                         std::vector<double>* probabilities, std::vector<float>* labels) override;

  int64_t step() const override { return step_; }
  // What this trainer's training steps sent and received (compressed communication is
  // measured by it): the lookups' ids and answered rows, the update parts sent to
  // servers, and its all-gather contribution to each other trainer and theirs to it.
  const WireBytes& wire_bytes() const override { return wire_bytes_; }
  const DlrmModel<float>& model() const override { return model_; }
  // "cpu", "cuda:0": the device that computes the dense forward and backward.
  std::string device() const override { return backend_->name(); }
  const ps::EmbeddingShardStore& replicas() const override { return replicas_; }

  // For checkpoints: the dense state and the replicas, and the step to resume from.
  // set_step: kFailedPrecondition while parts are queued (their lookups name steps).
  // mutable_model: the caller may change the parameters (a device copies them in again).
  DlrmModel<float>& mutable_model() override {
    backend_->ParametersChanged();
    return model_;
  }
  DenseOptimizer<float>& dense_optimizer() override { return *dense_optimizer_; }
  ps::EmbeddingShardStore& mutable_replicas() override { return replicas_; }
  void set_step(int64_t step) override;

 private:
  struct Prepared;  // a part with its lookups in flight
  // Adds a training part's lookups (ids sent, rows answered) to wire_bytes_.
  void CountLookupBytes(const Prepared& p);
  // Validates `part` (labels if `training`) and submits its lookups for `step`.
  std::unique_ptr<Prepared> Prepare(const BatchView& part, int64_t step, bool training);
  void SubmitLookups(Prepared& p);
  // Waits for p's rows into fetched_; returns p's batch re-indexed into them.
  ValidatedBatch GatherRows(Prepared& p);
  // GatherRows' parts: the servers' answers placed into fetched_ (kDataLoss for an answer
  // of another size), and p's ids re-indexed into the fetched rows (local_ids_).
  void PlaceServedRows(Prepared& p);
  ValidatedBatch Reindexed(const Prepared& p);
  // PredictLogits once Flush has run.
  void PredictFlushed(const BatchView& batch, float* logits);
  std::vector<ps::FeatureUpdate> UpdatesFor(const std::vector<int32_t>& features,
                                            const ValidatedBatch& batch) const;
  // Resubmits the queued parts' lookups when the step numbers they were sent for are off.
  void RenumberQueue();
  // The phases of TrainStep: this rank's part, the exchange (into exchange_; the checks
  // and sums are dense_exchange.h's), and the updates.
  Contribution ComputePart(Prepared& p);
  std::vector<Contribution>& Exchange(Contribution mine);
  void ApplyUpdates(Prepared& p, const std::vector<Contribution>& by_rank);
  // ComputePart's: p.server_updates, each checked to fit one message (kInvalidArgument).
  void MakeServerUpdates(Prepared& p) const;

  const config::DlrmConfig config_;
  // The precision served rows, embedding gradients and dense gradients travel in
  // (DistributedConfig.wire_precision): FP32, or BF16 / FP16, rounded where they are made.
  const config::TableConfig::Precision wire_;
  collective::Communicator* comm_;
  ps::EmbeddingService* service_;
  ThreadPool* pool_;
  DlrmModel<float> model_;
  std::unique_ptr<DenseOptimizer<float>> dense_optimizer_;
  std::unique_ptr<TrainerBackend> backend_;  // computes on model_'s parameters
  ps::EmbeddingShardStore replicas_;
  std::vector<std::vector<ps::ShardLocation>> locations_;  // per table
  std::vector<std::vector<int32_t>> server_features_;      // per server: features it serves
  std::deque<std::unique_ptr<Prepared>> queue_;
  int64_t step_ = 0;

  // Per step, reused.
  std::vector<EmbeddingTable<float>> fetched_;
  std::vector<int64_t> local_ids_;
  std::vector<float> dense_grad_, d_pooled_;
  std::vector<Contribution> exchange_;  // by rank
  std::string send_buffer_;
  std::vector<uint16_t> wire_values_;  // a 16-bit wire's dense gradient
  WireBytes wire_bytes_;
};

}  // namespace dlrm::train

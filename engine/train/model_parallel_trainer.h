// A trainer of the Neo/ZionEX layout: every rank owns some table shards (model-parallel
// embeddings, no embedding servers) and holds the whole dense model (data-parallel MLPs).
// This is the layout of a node of GPUs (one rank per GPU, tables in HBM, pooled embeddings
// exchanged by all-to-all). The owned shards are pooled and updated on the trainer's
// device (owned_shards.h: by the host store, or in a GPU's memory), the replicated tables
// on the host; the dense forward and backward run on the trainer's device
// (trainer_backend.h: the CPU, or a GPU); the exchanges are host bytes over any
// communicator.
//
// The plan is PlanSharding(config, world_size, ShardOwners::kTrainers) with "server" r read
// as rank r: TABLE_WISE and COLUMN_WISE shards (owned by one rank), ROW_WISE pieces (row
// ranges on distinct ranks, fetched: shard/pooled_layout.h) and DATA_PARALLEL ones
// (replicated on every rank); shard/pooled_layout.h says what it refuses. Rank q trains
// the q-th run of samples of each global batch (all runs of one size, a power-of-two
// number of reduction chunks). A step is four collectives:
//  1. input (all-to-all): each rank validates its part and sends each owner the bags of
//     the features that owner pools and the distinct ids of its bags in each row-wise
//     piece the owner holds, with its readiness (or why its part is bad);
//  2. pooled (all-to-all): each owner pools its shards for the whole global batch and sends
//     every rank the pooled rows of its samples and the piece rows it asked for; each rank
//     pools the replicated tables and, from the rows it fetched, the row-wise tables
//     itself, and assembles its pooled rows;
//  3. gradients (all-to-all): each rank runs the dense forward/backward over its part and
//     sends each owner its gradient columns and the updates of its pieces' features
//     (ps::FeatureUpdate: bags and gradients), and every rank its loss, dense gradient (a
//     subtree of the global batch's reduction tree) and the replicated tables' update;
//  4. agreement (all-gather of a flag): each owner says whether its shards' and pieces'
//     updates are finite; then every rank applies the dense, replicated and owned updates,
//     or none does.
// Every owner's fused backward + optimizer sees the global batch's bags in the global order
// and the same gradient rows as one process, and every rank sums the dense gradient in the
// same tree: in fp32 a job equals the single-process Engine bitwise, whatever the world
// size and the thread counts. With distributed.wire_precision BF16 / FP16 the pooled rows,
// their gradients and the dense gradient are rounded where they are made (every rank sees
// the same bits; a job repeats bitwise run to run).
//
// Ownership: borrows the communicator and the pool, which outlive it.
// Threading: one call at a time. TrainStep, PredictLogits, Evaluate and AppendPredictions
// are collective: every rank calls the same sequence.
// Errors: a bad part (kInvalidArgument / kOutOfRange naming the field and the rank) fails
// the step on every rank alike before anything changes, as does a step whose gradients or
// updates are not finite (kFailedPrecondition); kDataLoss for a peer's malformed bytes,
// kTimeout for a rank that does not arrive. kInvalidArgument from the constructor for a
// plan the layout cannot exchange, a communicator of another size than the plan's, or
// distributed.mode HYBRID (stale reads are the embedding servers' bound).
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
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
#include "engine/ps/shard_store.h"
#include "engine/shard/plan.pb.h"
#include "engine/shard/pooled_layout.h"
#include "engine/train/dense_exchange.h"
#include "engine/train/owned_shards.h"
#include "engine/train/step.h"
#include "engine/train/sync_trainer.h"
#include "engine/train/trainer_backend.h"

namespace dlrm::train {

class ModelParallelTrainer : public SyncTrainer {
 public:
  // devices: the device side of the dense step (backend) and of the owned shards (owned)
  // for config.device() (trainer_backend.h; none: the CPU, any other device refused by
  // name).
  ModelParallelTrainer(const config::DlrmConfig& config, const shard::ShardingPlan& plan,
                       collective::Communicator* comm, ThreadPool* pool,
                       const TrainerDevices& devices = {});
  ~ModelParallelTrainer() override;

  // SyncTrainer: a queued part is validated when queued; its step (collective) exchanges
  // it. There is nothing to flush (every update is applied when its step returns).
  void Enqueue(const BatchView& part) override;
  float TrainStep() override;
  size_t queued() const override { return queue_.size(); }
  void Flush() override {}
  // Collective here (the owners pool every rank's share): ranks given different numbers of
  // batches all fail alike (kInvalidArgument naming two counts) and stay in step.
  void AppendPredictions(const std::vector<BatchView>& batches, size_t first, size_t stride,
                         std::vector<double>* probabilities, std::vector<float>* labels) override;
  // Trains this rank's part of the next global batch (collective); returns the global
  // batch's mean loss, the same on every rank. kFailedPrecondition if parts are queued.
  float TrainStep(const BatchView& part) override;
  // logits [batch.batch_size] of this rank's batch (collective: the owners pool it; ranks'
  // batches may differ in size).
  void PredictLogits(const BatchView& batch, float* logits);
  // Log loss and AUC over the labelled batches of every rank (collective; ranks may pass
  // different numbers of batches): the same result on every rank.
  EvalResult Evaluate(const std::vector<BatchView>& batches);

  int64_t step() const override { return step_; }
  const shard::PooledLayout& layout() const { return layout_; }
  const DlrmModel<float>& model() const override { return model_; }
  std::string device() const override { return backend_->name(); }
  // Where the owned shards are pooled and updated ("cpu", "cuda:0").
  std::string owned_device() const { return shards_->name(); }
  // The table shards this rank owns (the plan's shards of "server" rank()), current
  // (copied back from the device that trains them), and the replicated tables.
  const ps::EmbeddingShardStore& owned() const {
    shards_->PullState();
    return owned_;
  }
  const ps::EmbeddingShardStore& replicas() const override { return replicas_; }
  // Payload bytes of this rank's training steps to and from the other ranks.
  const WireBytes& wire_bytes() const override { return wire_bytes_; }

  // For checkpoints (sync_trainer.h); owned shards as the replicas.
  DlrmModel<float>& mutable_model() override {
    backend_->ParametersChanged();
    return model_;
  }
  DenseOptimizer<float>& dense_optimizer() override { return *dense_optimizer_; }
  ps::EmbeddingShardStore& mutable_replicas() override { return replicas_; }
  // The host copy, current; the device copies it in again before its next call.
  ps::EmbeddingShardStore& mutable_owned() {
    shards_->PullState();
    shards_->StoreChanged();
    return owned_;
  }
  void set_step(int64_t step) override;

 private:
  // config, once the job's settings suit this layout (sync, a communicator of the plan's
  // ranks); kInvalidArgument naming what does not, before anything is allocated.
  static const config::DlrmConfig& Checked(const config::DlrmConfig& config,
                                           const shard::ShardingPlan& plan,
                                           const collective::Communicator* comm);
  // kTrain: labels and equal power-of-two parts; kEvaluate: labels; kPredict: neither.
  enum class Purpose { kTrain, kPredict, kEvaluate };
  // This rank's batch, validated and copied, or why it cannot be used; not present: the
  // rank has no batch this round (prediction rounds).
  struct Part {
    OwnedBatch batch;
    ValidatedBatch validated;  // views `batch`
    Outcome outcome;           // not ok: why the part cannot be trained
    bool present = true;
  };
  struct Input;  // a batch after the input exchange
  struct Fetch;  // the row-wise pieces' rows: asked, answered, pooled, updated
  Part Prepare(const BatchView* part, Purpose purpose) const;
  // A training step of a prepared part (its error, if any, fails it on every rank).
  float Train(Part part);
  // Phase 1: sends the owners their bags of `part`; throws the first failed rank's error
  // on every rank.
  void ExchangeInput(Part part, Purpose purpose);
  // Phase 1's halves: this rank's bytes for each rank, and the received ones joined.
  std::vector<std::string> EncodeInputParts();
  void JoinInputParts(const std::vector<std::string>& received, Purpose purpose);
  // Collective rounds of prediction: round i predicts mine(i) (null: nothing this round;
  // every rank runs the same number of rounds), appending probabilities and labels.
  void PredictRounds(int64_t rounds, const std::function<const BatchView*(int64_t)>& mine,
                     std::vector<double>* probabilities, std::vector<float>* labels);
  // Every rank's number of evaluation batches (collective), in rank order; kDataLoss naming
  // the rank for a count outside [0, kMaxBatchCount] (what no rank could hold).
  static constexpr int64_t kMaxBatchCount = int64_t{1} << 31;
  std::vector<int64_t> GatherBatchCounts(size_t mine);
  // Phase 2: pooled_ [n x pooled_width] for this rank's samples.
  void ExchangePooled();
  // Phase 2's halves: the bytes for rank q (the owned rows of its samples and the piece
  // rows it asked for; the pooling's and lookups' outcome `done`), and rank r's received.
  std::string EncodePooledFor(int32_t q, const Outcome& done);
  void DecodePooledFrom(int32_t r, ByteReader* in, std::vector<float>* block);
  // The row-wise pieces: phase 1's requests to and from rank r, the
  // answers to every rank's (phase 2, in `done`'s attempt), the rows placed and pooled for
  // this rank's samples, phase 3's updates for each piece's rank, and phase 4's check.
  void InitFetch();
  void CollectFetchIds();
  void PutRowRequests(int32_t r, ByteWriter* out) const;
  void GetRowRequests(int32_t r, ByteReader* in);
  void AnswerRowRequests();
  void PutAnswers(int32_t q, ByteWriter* out);
  void PlaceRowsFrom(int32_t r, ByteReader* in);
  void PoolFetched(std::vector<float>* fetched);
  void EncodePieceUpdates(const ValidatedBatch& part);
  bool PieceUpdatesAreFinite(int64_t global_batch, const StepRates& rates);
  // Phase 3: the dense forward/backward; the contributions of every rank (exchange_) and
  // the gradient of this rank's owned pooled output (owned_grad_).
  Contribution ComputeDense();
  void ExchangeGradients(Contribution mine);
  // Phase 4 and the updates.
  void ApplyUpdates();
  // The communicator's, counted in wire_bytes_ during training steps.
  std::vector<std::string> AllToAll(const std::vector<std::string>& to_each);

  const config::DlrmConfig config_;
  const config::TableConfig::Precision wire_;
  collective::Communicator* comm_;
  ThreadPool* pool_;
  const shard::PooledLayout layout_;
  DlrmModel<float> model_;
  std::unique_ptr<DenseOptimizer<float>> dense_optimizer_;
  std::unique_ptr<TrainerBackend> backend_;  // computes on model_'s parameters
  ps::EmbeddingShardStore owned_;
  std::unique_ptr<OwnedShards> shards_;  // pools and updates owned_ on the device
  ps::EmbeddingShardStore replicas_;
  int64_t step_ = 0;
  bool counting_ = false;  // a training step's bytes are counted
  WireBytes wire_bytes_;
  std::deque<Part> queue_;

  // Per call, reused.
  std::unique_ptr<Input> in_;
  std::unique_ptr<Fetch> fetch_;
  std::vector<float> owned_out_, pooled_, dense_grad_, d_pooled_, owned_grad_;
  std::vector<Contribution> exchange_;
  std::vector<uint16_t> wire_values_;
};

}  // namespace dlrm::train

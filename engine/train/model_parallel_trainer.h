// A trainer of the Neo/ZionEX layout: every rank owns some table shards (model-parallel
// embeddings, no embedding servers) and holds the whole dense model (data-parallel MLPs).
// This is the layout of a node of GPUs (one rank per GPU, tables in HBM, pooled embeddings
// exchanged by all-to-all); here it runs with the CPU computing, over any communicator.
//
// The plan is PlanSharding(config, world_size) with "server" r read as rank r; it may use
// TABLE_WISE and COLUMN_WISE shards (owned by one rank) and DATA_PARALLEL ones (replicated
// on every rank); shard/pooled_layout.h says what it refuses. Rank q trains the q-th run of
// samples of each global batch (all runs of one size, a power-of-two number of reduction
// chunks). A step is four collectives:
//  1. input (all-to-all): each rank validates its part and sends each owner the bags of
//     the features that owner pools, with its readiness (or why its part is bad);
//  2. pooled (all-to-all): each owner pools its shards for the whole global batch and sends
//     every rank the pooled rows of its samples; each rank pools the replicated tables
//     itself and assembles its pooled rows;
//  3. gradients (all-to-all): each rank runs the dense forward/backward over its part and
//     sends each owner its gradient columns, and every rank its loss, dense gradient (a
//     subtree of the global batch's reduction tree) and the replicated tables' update;
//  4. agreement (all-gather of a flag): each owner says whether its shards' update is
//     finite; then every rank applies the dense, replicated and owned updates, or none does.
// Every owner's fused backward + optimizer sees the global batch's bags in the global order
// and the same gradient rows as one process, and every rank sums the dense gradient in the
// same tree: in fp32 a job equals the single-process Engine bitwise, whatever the world
// size and the thread counts. With distributed.wire_precision BF16 / FP16 the pooled rows,
// their gradients and the dense gradient are rounded where they are made (every rank sees
// the same bits; a job repeats bitwise run to run).
//
// Ownership: borrows the communicator and the pool, which outlive it.
// Threading: one call at a time. TrainStep, PredictLogits and Evaluate are collective: every
// rank calls the same sequence.
// Errors: a bad part (kInvalidArgument / kOutOfRange naming the field and the rank) fails
// the step on every rank alike before anything changes, as does a step whose gradients or
// updates are not finite (kFailedPrecondition); kDataLoss for a peer's malformed bytes,
// kTimeout for a rank that does not arrive. kInvalidArgument from the constructor for a
// plan the layout cannot exchange, or a communicator of another size than the plan's.
#pragma once

#include <cstdint>
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

namespace dlrm::train {

class ModelParallelTrainer {
 public:
  ModelParallelTrainer(const config::DlrmConfig& config, const shard::ShardingPlan& plan,
                       collective::Communicator* comm, ThreadPool* pool);
  ~ModelParallelTrainer();

  // Trains this rank's part of the next global batch (collective); returns the global
  // batch's mean loss, the same on every rank.
  float TrainStep(const BatchView& part);
  // logits [batch.batch_size] of this rank's batch (collective: the owners pool it; ranks'
  // batches may differ in size).
  void PredictLogits(const BatchView& batch, float* logits);
  // Log loss and AUC over the labelled batches of every rank (collective; ranks may pass
  // different numbers of batches): the same result on every rank.
  EvalResult Evaluate(const std::vector<BatchView>& batches);

  int64_t step() const { return step_; }
  const shard::PooledLayout& layout() const { return layout_; }
  const DlrmModel<float>& model() const { return model_; }
  // The table shards this rank owns (the plan's shards of "server" rank()), and the
  // replicated tables.
  const ps::EmbeddingShardStore& owned() const { return owned_; }
  const ps::EmbeddingShardStore& replicas() const { return replicas_; }
  // Payload bytes this rank's training steps sent to and received from the other ranks.
  struct WireBytes {
    int64_t steps = 0;
    int64_t sent = 0;
    int64_t received = 0;
  };
  const WireBytes& wire_bytes() const { return wire_bytes_; }

 private:
  struct Input;  // a batch after the input exchange
  // kTrain: labels and equal power-of-two parts; kEvaluate: labels; kPredict: neither.
  enum class Purpose { kTrain, kPredict, kEvaluate };
  // Phase 1: validates `part`, sends the owners their bags; throws the first failed rank's
  // error on every rank. part null: this rank has no batch this round (Evaluate).
  void ExchangeInput(const BatchView* part, Purpose purpose);
  // Phase 1's halves: this rank's bytes for each rank, and the received ones joined.
  std::vector<std::string> EncodeInputParts(const BatchView* part, Purpose purpose);
  void JoinInputParts(const std::vector<std::string>& received, Purpose purpose);
  // Phase 2: pooled_ [n x pooled_width] for this rank's samples.
  void ExchangePooled();
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
  ps::EmbeddingShardStore owned_;
  ps::EmbeddingShardStore replicas_;
  int64_t step_ = 0;
  bool counting_ = false;  // a training step's bytes are counted
  WireBytes wire_bytes_;

  // Per call, reused.
  std::unique_ptr<Input> in_;
  std::vector<float> owned_out_, pooled_, dense_grad_, d_pooled_, owned_grad_;
  std::vector<Contribution> exchange_;
  std::vector<uint16_t> wire_values_;
};

}  // namespace dlrm::train

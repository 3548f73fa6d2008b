// A trainer of synchronous data-parallel training with sharded embeddings (Neo's
// model-parallel embeddings + data-parallel MLPs), bitwise equal to one process.
//
// Every rank holds the dense model; rank k trains on the k-th run of samples of each global
// batch (all runs the same size, a power-of-two number of reduction chunks). A step:
//  1. fetches the rows of the part's distinct ids from their owners (servers, or the local
//     replicas of DATA_PARALLEL tables) and pools them exactly as one process would;
//  2. runs the dense forward/backward over its chunks: its dense gradient is a subtree of
//     the global batch's reduction tree;
//  3. all-gathers the ranks' subtrees and loss sums and finishes the tree on every rank
//     (same bits everywhere), then applies the dense optimizer;
//  4. sends each owner its features' bags and pooled gradients; the owner applies the
//     global batch's update (the single-process code) before serving the next lookups.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "engine/config/dlrm.pb.h"
#include "engine/core/thread_pool.h"
#include "engine/data/batch.h"
#include "engine/dist/communicator.h"
#include "engine/dist/embedding_service.h"
#include "engine/dist/embedding_shard_store.h"
#include "engine/model/dlrm_model.h"
#include "engine/optim/dense_optimizer.h"
#include "engine/shard/plan.pb.h"

namespace dlrm::dist {

class SyncTrainer {
 public:
  // Borrows comm, service and pool. config must pass ValidateConfig; plan must be the
  // plan every rank and server uses.
  SyncTrainer(const config::DlrmConfig& config, const shard::ShardingPlan& plan,
              Communicator* comm, EmbeddingService* service, ThreadPool* pool);

  // Collective over the communicator's ranks: this rank's part of one global batch.
  // Returns the global batch's mean loss (the same on every rank). A bad part, or one of
  // another size than the other ranks', fails the step on every rank with the same error
  // before anything changes.
  float TrainStep(const BatchView& part);

  int64_t step() const { return step_; }
  const DlrmModel<float>& model() const { return model_; }
  const EmbeddingShardStore& replicas() const { return replicas_; }

 private:
  // The rows of the part's distinct ids, as step-local tables, and the part re-indexed
  // into them.
  void FetchRows(const ValidatedBatch& batch);
  std::vector<FeatureUpdate> UpdatesFor(const std::vector<int32_t>& features,
                                        const ValidatedBatch& batch) const;

  const config::DlrmConfig config_;
  Communicator* comm_;
  EmbeddingService* service_;
  ThreadPool* pool_;
  DlrmModel<float> model_;
  std::unique_ptr<DenseOptimizer<float>> dense_optimizer_;
  EmbeddingShardStore replicas_;
  std::vector<std::vector<ShardLocation>> locations_;  // per table
  std::vector<std::vector<int32_t>> server_features_;  // per server: features it serves
  int64_t step_ = 0;

  // Per step, reused.
  std::vector<EmbeddingTable<float>> fetched_;
  std::vector<int64_t> local_ids_;
  std::vector<float> dense_grad_, d_pooled_;
};

}  // namespace dlrm::dist

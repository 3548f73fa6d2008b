// The DLRM graph: dense features -> bottom MLP -> x; sparse features -> embedding bags;
// interaction(x, bags) -> top MLP -> logit -> BCE loss. Owns every parameter.
//
// All dense parameters (both MLPs) live in one flat vector, so the gradient, the optimizer
// state and the fixed-order cross-chunk reduction are flat arrays. Embedding tables are
// stored per table.
//
// The batch is processed in chunks of reduction_chunk_rows rows. Each chunk runs the
// whole forward and backward on its own rows and writes its own partial dense gradient;
// partials are combined in a fixed binary tree. Which thread runs which chunk therefore
// never changes a result: training is bitwise reproducible for any thread count.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/config/dlrm.pb.h"
#include "engine/core/object_pool.h"
#include "engine/core/thread_pool.h"
#include "engine/data/batch.h"
#include "engine/dense/cross_net.h"
#include "engine/dense/interaction.h"
#include "engine/dense/mlp.h"
#include "engine/embedding/embedding_bag.h"
#include "engine/embedding/embedding_table.h"
#include "engine/embedding/sparse_optimizer.h"

namespace dlrm {

// A named dense parameter: a [rows x cols] (or [size]) slice of the flat vector.
struct DenseParamInfo {
  std::string name;  // "bottom_mlp.0.weight", "top_mlp.2.bias", ...
  std::vector<int64_t> shape;
  size_t offset;
  size_t size;
};

// How many dense parameters (both MLPs and the cross network) a model of `config` has,
// from the config alone, nothing allocated: what the memory budget counts. config as for
// DlrmModel.
size_t DenseParamCount(const config::DlrmConfig& config);

template <typename T>
class DlrmModel {
 public:
  // config must have passed ValidateConfig. Initializes every parameter from config.seed;
  // tables are allocated and filled in parallel on pool (if given): each value is a pure
  // function of (seed, table, row, column), so the result is the same on any pool.
  // With allocate_tables false the model holds only the dense part (a trainer whose
  // embeddings live on servers): tables() is empty and the *Part calls take the rows.
  explicit DlrmModel(const config::DlrmConfig& config, ThreadPool* pool = nullptr,
                     bool allocate_tables = true);
  DlrmModel(const DlrmModel&) = delete;
  DlrmModel& operator=(const DlrmModel&) = delete;

  // What ValidateBatch needs to know about this model's features.
  const std::vector<SparseFeatureSpec>& feature_specs() const { return feature_specs_; }
  int32_t num_dense_features() const { return num_dense_; }

  std::vector<T>& dense_params() { return dense_params_; }
  const std::vector<T>& dense_params() const { return dense_params_; }
  const std::vector<DenseParamInfo>& dense_param_infos() const { return param_infos_; }
  std::vector<EmbeddingTable<T>>& tables() { return tables_; }
  const std::vector<EmbeddingTable<T>>& tables() const { return tables_; }

  // Forward and backward over the batch. Returns the mean BCE loss; dense_grad (resized to
  // dense_params().size()) receives the gradient of that mean; d_pooled (resized to
  // B x pooled_width) the gradient w.r.t. the pooled embeddings.
  double ForwardBackward(const ValidatedBatch& batch, std::vector<T>* dense_grad,
                         std::vector<T>* d_pooled, ThreadPool* pool);

  // One trainer's part of a data-parallel step: ForwardBackward over this trainer's rows
  // with the embeddings pooled by `bags` (the step's fetched rows) and gradients scaled by
  // 1 / global_batch. Returns the loss SUM over the rows; dense_grad is the tree sum of
  // this part's chunks, which is a subtree of the global batch's tree when every trainer
  // has the same power-of-two number of chunks (what sync training requires).
  double ForwardBackwardPart(const ValidatedBatch& batch, int64_t global_batch,
                             const EmbeddingBagCollection<T>& bags, std::vector<T>* dense_grad,
                             std::vector<T>* d_pooled, ThreadPool* pool);

  // The same with the part's embeddings already pooled: pooled [batch_size x pooled_width],
  // in the model's column order (a trainer that receives them from their owners,
  // train/model_parallel_trainer.h). Bitwise the call above given the same pooled values.
  double ForwardBackwardPooled(const ValidatedBatch& batch, int64_t global_batch, const T* pooled,
                               std::vector<T>* dense_grad, std::vector<T>* d_pooled,
                               ThreadPool* pool);

  // How sparse features map onto tables and pooled columns (one binding per feature).
  const std::vector<FeatureBinding>& feature_bindings() const { return bindings_; }
  // The graph's parts, for a device backend that runs the same model (cuda/backend.h).
  const Mlp<T>& bottom_mlp() const { return *bottom_; }
  const Interaction<T>& interaction() const { return *interaction_; }
  // DCNv2's cross network between the interaction and the top MLP; null unless DCN.
  const CrossNet<T>* cross_net() const { return cross_.get(); }
  const Mlp<T>& top_mlp() const { return *top_; }
  int32_t pooled_width() const { return pooled_width_; }
  int64_t chunk_rows() const { return chunk_rows_; }

  // Applies the sparse optimizer to every touched row given d_pooled from ForwardBackward.
  void SparseBackwardAndUpdate(const ValidatedBatch& batch, const std::vector<T>& d_pooled,
                               SparseOptimizer<T>& optimizer, float lr, int64_t step,
                               ThreadPool* pool);
  // The same in two halves (EmbeddingBagCollection::UpdateIsFinite, ApplyUpdate): whether
  // every touched row's update would be finite, nothing written; then the update.
  bool SparseUpdateIsFinite(const ValidatedBatch& batch, const std::vector<T>& d_pooled,
                            const SparseOptimizer<T>& optimizer, float lr, int64_t step,
                            ThreadPool* pool);
  void ApplySparseUpdate(const std::vector<T>& d_pooled, SparseOptimizer<T>& optimizer, float lr,
                         int64_t step, ThreadPool* pool);

  // logits [B]. Safe to call concurrently with other const calls.
  void PredictLogits(const ValidatedBatch& batch, T* logits, ThreadPool* pool) const;
  // The same with the embeddings pooled by `bags` (a trainer's fetched rows).
  void PredictLogits(const ValidatedBatch& batch, const EmbeddingBagCollection<T>& bags, T* logits,
                     ThreadPool* pool) const;
  // The same from pooled embeddings [batch_size x pooled_width] (ForwardBackwardPooled's).
  void PredictLogitsPooled(const ValidatedBatch& batch, const T* pooled, T* logits,
                           ThreadPool* pool) const;

 private:
  // The constructor's parts: each sparse feature bound to its table (bindings_,
  // feature_specs_, pooled_width_; returns the features' dims), and the dense layers with
  // their initialized parameters.
  std::vector<int> BindFeatures(const config::ModelConfig& model);
  void BuildDense(const config::DlrmConfig& config, const std::vector<int>& feature_dims);

  // Per-chunk activations and gradients; one per concurrently running chunk, leased from
  // chunk_buffers_ so that a step allocates nothing once the pool is warm.
  struct ChunkBuffers {
    std::vector<T> dense_in, bottom_acts, inter_out, cross_acts, top_acts;
    std::vector<T> dlogits, d_top_in, d_inter, dx, scratch;
    std::vector<const void*> embedding_rows;
  };
  // Rows per chunk of PredictLogits: at least reduction_chunk_rows. Prediction sums
  // nothing across rows, so its chunks need not be the reduction chunks; larger ones
  // amortize the GEMMs' packing of the weights over more rows. The size depends on the
  // config only, so predictions do not depend on the thread count.
  static constexpr int64_t kPredictChunkRows = 256;
  int64_t PredictChunkRows() const { return std::max<int64_t>(chunk_rows_, kPredictChunkRows); }
  static int64_t NumChunks(int64_t batch_size, int64_t rows);
  // pooled [B x pooled_width] = every sample's embedding bags, in chunks on the pool.
  void PoolBatch(const ValidatedBatch& batch, const EmbeddingBagCollection<T>& bags,
                 int64_t chunk_rows, T* pooled, ThreadPool* pool) const;
  // The dense forward of rows [r0, r1) given their pooled embeddings; returns the logits.
  // weights: the call's packed weights, shared by its chunks (null: each GEMM packs its own).
  const T* ForwardChunk(const ValidatedBatch& batch, const T* pooled, int64_t r0, int64_t r1,
                        ChunkBuffers& buf, GemmPackCache* weights) const;
  // The top MLP's input of a chunk ForwardChunk computed: the cross network's output, or
  // the interaction's.
  const T* TopInput(const ChunkBuffers& buf, int64_t n) const;
  // The dense backward of a chunk from its logits' gradient (buf.dlogits): the top MLP,
  // the cross network, the interaction (d_pooled) and the bottom MLP, into grads.
  void DenseBackward(const T* pooled, int64_t n, ChunkBuffers& buf, T* grads, T* d_pooled,
                     GemmPackCache* weights) const;
  // A cache of packed weights for one call of `chunks` chunks, reset (the parameters may
  // have changed since the last call); worth it only when chunks share it.
  typename ObjectPool<GemmPackCache>::Lease LeaseWeights() const;
  // Pools the batch with `bags`, then DenseChunks.
  double ForwardBackwardChunks(const ValidatedBatch& batch, T grad_scale,
                               const EmbeddingBagCollection<T>& bags, std::vector<T>* dense_grad,
                               std::vector<T>* d_pooled, ThreadPool* pool);
  // Chunked dense forward + backward from pooled embeddings; returns the loss sum,
  // dense_grad the chunks' tree sum.
  double DenseChunks(const ValidatedBatch& batch, T grad_scale, const T* pooled,
                     std::vector<T>* dense_grad, std::vector<T>* d_pooled, ThreadPool* pool);

  int32_t num_dense_;
  int64_t chunk_rows_;
  std::vector<SparseFeatureSpec> feature_specs_;
  std::vector<EmbeddingTable<T>> tables_;
  std::vector<FeatureBinding> bindings_;
  int32_t pooled_width_ = 0;
  std::unique_ptr<EmbeddingBagCollection<T>> bags_;  // null without tables
  std::unique_ptr<Mlp<T>> bottom_;
  std::unique_ptr<Interaction<T>> interaction_;
  std::unique_ptr<CrossNet<T>> cross_;
  std::unique_ptr<Mlp<T>> top_;
  std::vector<T> dense_params_;
  std::vector<DenseParamInfo> param_infos_;
  std::vector<std::vector<T>> chunk_grads_;  // reused across steps
  mutable ObjectPool<ChunkBuffers> chunk_buffers_;
  mutable ObjectPool<std::vector<T>> batch_buffers_;  // a whole batch's pooled embeddings
  // The dense layers' weights packed once per call for every chunk (gemm.h): leased per
  // call, so concurrent predictions never share one.
  mutable ObjectPool<GemmPackCache> packed_weights_;
};

}  // namespace dlrm

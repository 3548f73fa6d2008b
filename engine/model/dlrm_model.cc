#include "engine/model/dlrm_model.h"

#include <algorithm>
#include <type_traits>

#include "engine/config/config.h"
#include "engine/core/cpu_features.h"
#include "engine/core/status.h"
#include "engine/core/tree_reduce.h"
#include "engine/dense/loss.h"
#include "engine/embedding/dynamic_rows.h"

namespace dlrm {

namespace {

void AddMlpInfos(const std::string& prefix, int in_dim, const std::vector<int>& sizes,
                 size_t offset, std::vector<DenseParamInfo>* infos) {
  int in = in_dim;
  for (size_t l = 0; l < sizes.size(); ++l) {
    const size_t w = static_cast<size_t>(sizes[l]) * in;
    infos->push_back({prefix + "." + std::to_string(l) + ".weight", {sizes[l], in}, offset, w});
    offset += w;
    infos->push_back({prefix + "." + std::to_string(l) + ".bias",
                      {sizes[l]},
                      offset,
                      static_cast<size_t>(sizes[l])});
    offset += sizes[l];
    in = sizes[l];
  }
}

template <typename T>
void AddCrossInfos(const CrossNet<T>& cross, std::vector<DenseParamInfo>* infos) {
  const auto d = static_cast<int64_t>(cross.dim()), r = static_cast<int64_t>(cross.rank());
  for (int l = 0; l < cross.num_layers(); ++l) {
    const std::string prefix = "cross." + std::to_string(l);
    if (r == 0) {
      infos->push_back({prefix + ".weight", {d, d}, cross.w_offset(l), static_cast<size_t>(d * d)});
    } else {
      infos->push_back({prefix + ".v", {r, d}, cross.v_offset(l), static_cast<size_t>(r * d)});
      infos->push_back({prefix + ".u", {d, r}, cross.u_offset(l), static_cast<size_t>(d * r)});
    }
    infos->push_back({prefix + ".bias", {d}, cross.bias_offset(l), static_cast<size_t>(d)});
  }
}

// The dense layers of a model at their offsets in the flat parameter vector (bottom MLP,
// cross network, top MLP), nothing allocated.
template <typename T>
struct DenseLayers {
  std::unique_ptr<Mlp<T>> bottom, top;
  std::unique_ptr<Interaction<T>> interaction;
  std::unique_ptr<CrossNet<T>> cross;  // DCN only
  size_t num_params = 0;
};

std::vector<int> LayerSizes(const config::MlpConfig& mlp) {
  return {mlp.layer_sizes().begin(), mlp.layer_sizes().end()};
}

template <typename T>
DenseLayers<T> MakeDenseLayers(const config::ModelConfig& model,
                               const std::vector<int>& feature_dims, GemmPrecision precision) {
  DenseLayers<T> d;
  d.bottom = std::make_unique<Mlp<T>>(model.num_dense_features(), LayerSizes(model.bottom_mlp()),
                                      /*relu_last=*/true, 0, precision);
  const bool dcn = model.interaction() == config::ModelConfig::DCN;
  d.interaction = std::make_unique<Interaction<T>>(
      dcn ? config::ModelConfig::CAT : model.interaction(), d.bottom->out_dim(), feature_dims,
      model.dot_self_interaction());
  d.num_params = d.bottom->num_params();
  if (dcn) {
    d.cross = std::make_unique<CrossNet<T>>(d.interaction->out_dim(), model.dcn().num_layers(),
                                            model.dcn().rank(), d.num_params, precision);
    d.num_params += d.cross->num_params();
  }
  d.top = std::make_unique<Mlp<T>>(d.interaction->out_dim(), LayerSizes(model.top_mlp()),
                                   /*relu_last=*/false, d.num_params, precision);
  d.num_params += d.top->num_params();
  return d;
}

// What the model's GEMMs multiply: bf16 where the config asks for MEDIUM on the CPU, fp32
// otherwise (a CUDA model's host copy too). kFailedPrecondition where this CPU cannot, or
// where it has AMX and Linux refused this process the tiles.
template <typename T>
GemmPrecision CpuGemmPrecision(const config::DlrmConfig& config) {
  const config::DeviceConfig& d = config.device();
  if (!std::is_same_v<T, float> || d.kind() != config::DeviceConfig::CPU ||
      d.matmul_precision() != config::DeviceConfig::MEDIUM)
    return GemmPrecision::kFp32;
  if (!CpuHasAvx512Bf16())
    Throw(StatusCode::kFailedPrecondition,
          "device.matmul_precision MEDIUM multiplies bf16, which on the CPU needs AVX512-BF16: "
          "this CPU ",
          ReadMaxIsa().value != nullptr ? "(capped by DLRM_MAX_ISA) " : "",
          "lacks it; use HIGHEST (fp32)");
  // Another kernel would give other bits than every other process on this machine.
  if (AmxBf16Refused())
    Throw(StatusCode::kFailedPrecondition,
          "device.matmul_precision MEDIUM multiplies bf16 on AMX's tiles on this CPU, but "
          "Linux refused this process their state (arch_prctl ARCH_REQ_XCOMP_PERM: a thread's "
          "alternate signal stack too small for AMX's signal frames?); set "
          "DLRM_MAX_ISA=avx512 in the environment the process starts with to multiply on "
          "AVX512-BF16 (other bits), or use HIGHEST (fp32)");
  return GemmPrecision::kBf16;
}

}  // namespace

template <typename T>
DlrmModel<T>::DlrmModel(const config::DlrmConfig& config, ThreadPool* pool, bool allocate_tables)
    : num_dense_(config.model().num_dense_features()), chunk_rows_(config.reduction_chunk_rows()) {
  const config::ModelConfig& model = config.model();
  tables_ = BuildTables<T>(allocate_tables ? model.tables_size() : 0, pool, [&](int64_t t) {
    const auto& tc = model.tables(static_cast<int>(t));
    // An SSD table holds its cache here, whose rows are filled when rows come in.
    EmbeddingTable<T> table(tc.name(), ResidentRows(config, static_cast<int>(t)), tc.dim(),
                            tc.precision(), tc.rounding());
    if (!tc.has_ssd())
      table.Initialize(tc.initializer(), config.seed(), static_cast<int32_t>(t));
    else
      table.SetRoundingKey(config.seed(), static_cast<int32_t>(t));
    return table;
  });

  const std::vector<int> feature_dims = BindFeatures(model);
  if (allocate_tables)
    bags_ = std::make_unique<EmbeddingBagCollection<T>>(&tables_, bindings_, pooled_width_);
  BuildDense(config, feature_dims);
}

template <typename T>
std::vector<int> DlrmModel<T>::BindFeatures(const config::ModelConfig& model) {
  std::vector<int> feature_dims;
  int32_t pooled_width = 0;
  for (const auto& feature : model.sparse_features()) {
    const int t = FindTable(model, feature.table());
    FeatureBinding binding;
    binding.table = t;
    binding.offset = pooled_width;
    binding.mean = feature.pooling() == config::SparseFeatureConfig::MEAN;
    bindings_.push_back(binding);
    feature_specs_.push_back(
        {t, model.tables(t).num_rows(), model.tables(t).kind() == config::TableConfig::DYNAMIC});
    feature_dims.push_back(model.tables(t).dim());
    pooled_width += model.tables(t).dim();
  }
  pooled_width_ = pooled_width;
  return feature_dims;
}

template <typename T>
void DlrmModel<T>::BuildDense(const config::DlrmConfig& config,
                              const std::vector<int>& feature_dims) {
  const config::ModelConfig& model = config.model();
  DenseLayers<T> layers = MakeDenseLayers<T>(model, feature_dims, CpuGemmPrecision<T>(config));
  bottom_ = std::move(layers.bottom);
  interaction_ = std::move(layers.interaction);
  cross_ = std::move(layers.cross);
  top_ = std::move(layers.top);
  // Parameters: bottom MLP, cross network, top MLP. Each draws from its own streams, so a
  // model without a cross network has the values it always had.
  dense_params_.assign(layers.num_params, T(0));
  bottom_->Initialize(dense_params_.data(), config.seed(), 0);
  top_->Initialize(dense_params_.data(), config.seed(), 1 << 16);
  AddMlpInfos("bottom_mlp", num_dense_, LayerSizes(model.bottom_mlp()), 0, &param_infos_);
  if (cross_) {
    cross_->Initialize(dense_params_.data(), config.seed(), 2 << 16);
    AddCrossInfos(*cross_, &param_infos_);
  }
  AddMlpInfos("top_mlp", interaction_->out_dim(), LayerSizes(model.top_mlp()), top_->param_offset(),
              &param_infos_);
}

size_t DenseParamCount(const config::DlrmConfig& config) {
  const config::ModelConfig& model = config.model();
  std::vector<int> feature_dims;
  for (const auto& feature : model.sparse_features())
    feature_dims.push_back(model.tables(FindTable(model, feature.table())).dim());
  return MakeDenseLayers<float>(model, feature_dims, GemmPrecision::kFp32).num_params;
}

template <typename T>
int64_t DlrmModel<T>::NumChunks(int64_t batch_size, int64_t rows) {
  return (batch_size + rows - 1) / rows;
}

template <typename T>
void DlrmModel<T>::PoolBatch(const ValidatedBatch& batch, const EmbeddingBagCollection<T>& bags,
                             int64_t chunk_rows, T* pooled, ThreadPool* pool) const {
  const int64_t B = batch.view.batch_size;
  const int32_t width = bags.pooled_width();
  auto run = [&](int64_t c) {
    const int64_t r0 = c * chunk_rows, r1 = std::min(B, r0 + chunk_rows);
    const auto lease = chunk_buffers_.Acquire();
    bags.Forward(batch, r0, r1, pooled + r0 * width, &lease->embedding_rows);
  };
  ParallelFor(pool, NumChunks(B, chunk_rows), run);
}

template <typename T>
const T* DlrmModel<T>::ForwardChunk(const ValidatedBatch& batch, const T* pooled, int64_t r0,
                                    int64_t r1, ChunkBuffers& buf, GemmPackCache* weights) const {
  const int64_t n = r1 - r0;
  buf.dense_in.resize(n * num_dense_);
  const float* dense = batch.view.dense + r0 * num_dense_;
  std::copy(dense, dense + n * num_dense_, buf.dense_in.begin());
  buf.bottom_acts.resize(n * bottom_->activations_per_row());
  const T* x = bottom_->Forward(dense_params_.data(), buf.dense_in.data(), n,
                                buf.bottom_acts.data(), weights);
  buf.inter_out.resize(n * interaction_->out_dim());
  interaction_->Forward(x, pooled, n, buf.inter_out.data());
  if (cross_) {
    buf.cross_acts.resize(n * cross_->activations_per_row());
    cross_->Forward(dense_params_.data(), buf.inter_out.data(), n, buf.cross_acts.data(), weights);
  }
  buf.top_acts.resize(n * top_->activations_per_row());
  return top_->Forward(dense_params_.data(), TopInput(buf, n), n, buf.top_acts.data(), weights);
}

template <typename T>
typename ObjectPool<GemmPackCache>::Lease DlrmModel<T>::LeaseWeights() const {
  auto lease = packed_weights_.Acquire();
  lease->Reset();
  return lease;
}

template <typename T>
const T* DlrmModel<T>::TopInput(const ChunkBuffers& buf, int64_t n) const {
  return cross_ ? cross_->Output(buf.cross_acts.data(), n) : buf.inter_out.data();
}

template <typename T>
void DlrmModel<T>::DenseBackward(const T* pooled, int64_t n, ChunkBuffers& buf, T* grads,
                                 T* d_pooled, GemmPackCache* weights) const {
  const T* params = dense_params_.data();
  size_t scratch = std::max(top_->scratch_per_row(), bottom_->scratch_per_row());
  if (cross_) scratch = std::max(scratch, cross_->scratch_per_row());
  buf.scratch.resize(n * scratch);
  buf.d_inter.resize(n * interaction_->out_dim());
  buf.d_top_in.resize(cross_ ? n * interaction_->out_dim() : 0);
  T* d_top_in = cross_ ? buf.d_top_in.data() : buf.d_inter.data();
  top_->Backward(params, TopInput(buf, n), buf.top_acts.data(), buf.dlogits.data(), n, grads,
                 d_top_in, buf.scratch.data(), weights);
  if (cross_)
    cross_->Backward(params, buf.inter_out.data(), buf.cross_acts.data(), d_top_in, n, grads,
                     buf.d_inter.data(), buf.scratch.data(), weights);
  buf.dx.resize(n * bottom_->out_dim());
  const T* x = buf.bottom_acts.data() + (buf.bottom_acts.size() - n * bottom_->out_dim());
  interaction_->Backward(x, pooled, buf.d_inter.data(), n, buf.dx.data(), d_pooled);
  bottom_->Backward(params, buf.dense_in.data(), buf.bottom_acts.data(), buf.dx.data(), n, grads,
                    nullptr, buf.scratch.data(), weights);
}

template <typename T>
double DlrmModel<T>::ForwardBackward(const ValidatedBatch& batch, std::vector<T>* dense_grad,
                                     std::vector<T>* d_pooled, ThreadPool* pool) {
  DLRM_INTERNAL_CHECK(bags_ != nullptr);
  const int64_t B = batch.view.batch_size;
  return ForwardBackwardChunks(batch, T(1) / static_cast<T>(B), *bags_, dense_grad, d_pooled,
                               pool) /
         static_cast<double>(B);
}

template <typename T>
double DlrmModel<T>::ForwardBackwardPart(const ValidatedBatch& batch, int64_t global_batch,
                                         const EmbeddingBagCollection<T>& bags,
                                         std::vector<T>* dense_grad, std::vector<T>* d_pooled,
                                         ThreadPool* pool) {
  DLRM_INTERNAL_CHECK(global_batch >= batch.view.batch_size);
  return ForwardBackwardChunks(batch, T(1) / static_cast<T>(global_batch), bags, dense_grad,
                               d_pooled, pool);
}

template <typename T>
double DlrmModel<T>::ForwardBackwardPooled(const ValidatedBatch& batch, int64_t global_batch,
                                           const T* pooled, std::vector<T>* dense_grad,
                                           std::vector<T>* d_pooled, ThreadPool* pool) {
  DLRM_INTERNAL_CHECK(global_batch >= batch.view.batch_size);
  return DenseChunks(batch, T(1) / static_cast<T>(global_batch), pooled, dense_grad, d_pooled,
                     pool);
}

template <typename T>
double DlrmModel<T>::ForwardBackwardChunks(const ValidatedBatch& batch, T grad_scale,
                                           const EmbeddingBagCollection<T>& bags,
                                           std::vector<T>* dense_grad, std::vector<T>* d_pooled,
                                           ThreadPool* pool) {
  DLRM_INTERNAL_CHECK(bags.pooled_width() == pooled_width_);
  const int64_t B = batch.view.batch_size;
  // Every lookup of the batch first, then the dense layers: interleaved with the GEMMs,
  // whose weights stream through the caches, the hot embedding rows would be evicted
  // between chunks (measured: 2-4x slower lookups on multihot).
  const auto pooled_lease = batch_buffers_.Acquire();
  std::vector<T>& pooled = *pooled_lease;
  pooled.resize(static_cast<size_t>(B) * pooled_width_);
  PoolBatch(batch, bags, chunk_rows_, pooled.data(), pool);
  return DenseChunks(batch, grad_scale, pooled.data(), dense_grad, d_pooled, pool);
}

template <typename T>
double DlrmModel<T>::DenseChunks(const ValidatedBatch& batch, T grad_scale, const T* pooled,
                                 std::vector<T>* dense_grad, std::vector<T>* d_pooled,
                                 ThreadPool* pool) {
  const int64_t B = batch.view.batch_size;
  const int64_t chunks = NumChunks(B, chunk_rows_);
  const size_t num_params = dense_params_.size();
  const int32_t width = pooled_width_;
  if (static_cast<int64_t>(chunk_grads_.size()) < chunks) chunk_grads_.resize(chunks);
  d_pooled->resize(static_cast<size_t>(B) * width);
  std::vector<double> chunk_loss(chunks, 0.0);
  const auto packed = LeaseWeights();
  GemmPackCache* weights = chunks > 1 ? &*packed : nullptr;
  auto run_chunk = [&](int64_t c) {
    const int64_t r0 = c * chunk_rows_, r1 = std::min(B, r0 + chunk_rows_), n = r1 - r0;
    const auto lease = chunk_buffers_.Acquire();
    ChunkBuffers& buf = *lease;
    const T* chunk_pooled = pooled + r0 * width;
    const T* logits = ForwardChunk(batch, chunk_pooled, r0, r1, buf, weights);
    buf.dlogits.resize(n);
    chunk_loss[c] =
        BceWithLogits(logits, batch.view.labels + r0, n, grad_scale, buf.dlogits.data());
    std::vector<T>& grads = chunk_grads_[c];
    grads.resize(num_params);
    DenseBackward(chunk_pooled, n, buf, grads.data(), d_pooled->data() + r0 * width, weights);
  };
  ParallelFor(pool, chunks, run_chunk);

  std::vector<T*> partials;
  for (int64_t c = 0; c < chunks; ++c) partials.push_back(chunk_grads_[c].data());
  TreeReduceInto(partials, num_params, pool);
  // Handed over, not copied (a DCNv2 model's is 64 MB); the caller's old buffer becomes
  // chunk 0's, which the next step overwrites.
  dense_grad->swap(chunk_grads_[0]);
  std::vector<double*> loss_partials;
  for (auto& l : chunk_loss) loss_partials.push_back(&l);
  TreeReduceInto(loss_partials, 1, nullptr);
  return chunk_loss[0];
}

template <typename T>
void DlrmModel<T>::SparseBackwardAndUpdate(const ValidatedBatch& batch,
                                           const std::vector<T>& d_pooled,
                                           SparseOptimizer<T>& optimizer, float lr, int64_t step,
                                           ThreadPool* pool) {
  DLRM_INTERNAL_CHECK(bags_ != nullptr);
  bags_->BackwardAndUpdate(batch, d_pooled.data(), optimizer, lr, step, pool);
}

template <typename T>
bool DlrmModel<T>::SparseUpdateIsFinite(const ValidatedBatch& batch, const std::vector<T>& d_pooled,
                                        const SparseOptimizer<T>& optimizer, float lr, int64_t step,
                                        ThreadPool* pool) {
  DLRM_INTERNAL_CHECK(bags_ != nullptr);
  return bags_->UpdateIsFinite(batch, d_pooled.data(), optimizer, lr, step, pool);
}

template <typename T>
void DlrmModel<T>::ApplySparseUpdate(const std::vector<T>& d_pooled, SparseOptimizer<T>& optimizer,
                                     float lr, int64_t step, ThreadPool* pool) {
  DLRM_INTERNAL_CHECK(bags_ != nullptr);
  bags_->ApplyUpdate(d_pooled.data(), optimizer, lr, step, pool);
}

template <typename T>
void DlrmModel<T>::PredictLogits(const ValidatedBatch& batch, T* logits, ThreadPool* pool) const {
  DLRM_INTERNAL_CHECK(bags_ != nullptr);
  PredictLogits(batch, *bags_, logits, pool);
}

template <typename T>
void DlrmModel<T>::PredictLogits(const ValidatedBatch& batch, const EmbeddingBagCollection<T>& bags,
                                 T* logits, ThreadPool* pool) const {
  DLRM_INTERNAL_CHECK(bags.pooled_width() == pooled_width_);
  const int64_t B = batch.view.batch_size;
  const auto pooled_lease = batch_buffers_.Acquire();
  std::vector<T>& pooled = *pooled_lease;
  pooled.resize(static_cast<size_t>(B) * pooled_width_);
  PoolBatch(batch, bags, PredictChunkRows(), pooled.data(), pool);
  PredictLogitsPooled(batch, pooled.data(), logits, pool);
}

template <typename T>
void DlrmModel<T>::PredictLogitsPooled(const ValidatedBatch& batch, const T* pooled, T* logits,
                                       ThreadPool* pool) const {
  const int64_t B = batch.view.batch_size;
  const int64_t rows = PredictChunkRows();
  const int64_t chunks = NumChunks(B, rows);
  const auto packed = LeaseWeights();
  GemmPackCache* weights = chunks > 1 ? &*packed : nullptr;
  auto run_chunk = [&](int64_t c) {
    const int64_t r0 = c * rows, r1 = std::min(B, r0 + rows);
    const auto lease = chunk_buffers_.Acquire();
    const T* out = ForwardChunk(batch, pooled + r0 * pooled_width_, r0, r1, *lease, weights);
    std::copy(out, out + (r1 - r0), logits + r0);
  };
  ParallelFor(pool, chunks, run_chunk);
}

template class DlrmModel<float>;
template class DlrmModel<double>;

}  // namespace dlrm

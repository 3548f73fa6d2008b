#include "engine/cuda/backend.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <exception>
#include <mutex>
#include <string>
#include <vector>

#include "engine/core/log.h"
#include "engine/core/status.h"
#include "engine/cuda/batch_staging.h"
#include "engine/cuda/dense_network.h"
#include "engine/cuda/dense_optimizer.h"
#include "engine/cuda/device.h"
#include "engine/cuda/device_buffer.h"
#include "engine/cuda/device_tables.h"
#include "engine/cuda/embedding_backward.h"
#include "engine/cuda/finite.h"
#include "engine/cuda/step_graph.h"
#include "engine/train/step.h"

namespace dlrm::cuda {
namespace {

// Every activation and gradient of a training step; sized by the batch's shape, so a step
// of the shape before allocates nothing (what a CUDA graph needs).
struct StepBuffers {
  DenseActivations acts;
  DenseGradients grads;
  DeviceBuffer<int32_t> non_finite;  // > 0: the step diverged, the updates skip
};

// The per-step scalars, written by the host before each step (eager or replayed).
struct StepScalars {
  DenseStepArgs dense;
  SparseStepArgs sparse;
};

// What the host reads after a step.
struct StepResults {
  double loss_sum = 0;
  int32_t non_finite = 0;
};

class CudaBackend final : public train::Backend {
 public:
  CudaBackend(int ordinal, train::ModelState* state, const config::DlrmConfig& config,
              ThreadPool* pool)
      : s_(*state), config_(config), ordinal_(ordinal), device_(OpenDevice(ordinal)) {
    net_ = std::make_unique<DenseNetwork>(s_.model, stream_, PrecisionOf(config.device()));
    staging_ = std::make_unique<BatchStaging>(stream_, pool);
    tables_ = std::make_unique<DeviceTables>(stream_);
    scalars_.Resize(1);
    host_scalars_.Reserve(1);
    results_.Reserve(1);
    DeviceTables::Check(s_.model.tables(), s_.model.feature_bindings(), *s_.sparse_optimizer,
                        CacheRowKeys(), device_, FreeMemoryBytes());
    PushState();
  }
  ~CudaBackend() override {
    cudaSetDevice(ordinal_);  // this thread may have another device selected
    cudaStreamSynchronize(stream_);
    cudaStreamSynchronize(sort_stream_);  // before the sort's scratch is freed
    for (StepGraph& g : graphs_) g.Reset();
    staging_.reset();
    tables_.reset();
    net_.reset();
  }

  std::string name() const override { return "cuda:" + std::to_string(ordinal_); }

  double TrainStep(const ValidatedBatch& batch, const train::StepRates& rates,
                   const train::StepLookahead& ahead) override;
  void PredictLogits(const ValidatedBatch& batch, float* logits) const override;
  void PullState() const override;
  void PushState() override;
  void RowsChanged(const std::vector<ChangedRows>& changed) override;
  void RestoreChangedRows() override;
  void PullRows(const ChangedRows& rows) const override;
  StepPhases Phases() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return phases_.Read();
  }

 private:
  template <typename Fn>
  void ForEachState(Fn fn) const;
  // The device copy of the dense parameters and the dense optimizer's states: the order
  // of ForEachState.
  float* params() const { return state_[0].get(); }
  std::vector<float*> DenseStates() const;
  // The SSD tables' slot keys (DeviceTables' RowKeys), as the host copy holds them now.
  RowKeys CacheRowKeys() const { return s_.dynamic_tables.CacheRowKeys(s_.model.tables().size()); }

  void WriteScalars(const train::StepRates& rates);
  // The step on `in`: replayed, captured or eager (device.cuda_graph and the shape).
  void RunStep(const DeviceBatch& in);
  // Captures the step of `in` into `graph`; false (logged) if the capture failed, which
  // enqueued nothing.
  bool TryCapture(StepGraph& graph, const StepGraph::Key& key, const DeviceBatch& in);
  // Enqueues the whole step on stream_ (the embedding backward's sort on sort_stream_,
  // forked and joined by events): no allocation of a known shape, no synchronization.
  void EnqueueStep(const DeviceBatch& in);
  void Prefetch(const train::StepLookahead& ahead);

  // The embedding backward's sort of `args`' ids on sort_stream_ from the step's start
  // (step_start_), beside the network, ending in sorted_, which ApplyUpdates joins. Checks
  // and allocates everything first; a failure after the fork joins before it throws.
  void StartSort(const EmbeddingBackwardArgs& args);
  void CheckStepFinite();
  void ApplyUpdates(const EmbeddingBackwardArgs* sparse);
  EmbeddingBackwardArgs SparseArgs(const DeviceBatch& in) const;

  train::ModelState& s_;
  const config::DlrmConfig config_;
  const int ordinal_;
  const DeviceInfo device_;
  const Stream stream_;
  // A step forks here for the embedding backward's sort (StartSort) and joins back.
  const Stream sort_stream_{"cudaStreamCreate (sort)"};
  const Event step_start_{"cudaEventCreate (step start)"};
  const Event sorted_{"cudaEventCreate (sorted)"};
  // One stream and one cuBLASLt context (net_'s): every call is serialized.
  mutable std::mutex mu_;
  std::unique_ptr<DenseNetwork> net_;
  mutable std::vector<DeviceBuffer<float>> state_;  // ForEachState's order
  // The embedding tables and their optimizer's state; copied with state_ by PullState and
  // PushState.
  std::unique_ptr<DeviceTables> tables_;
  mutable bool host_stale_ = false;  // the device trained since PullState
  std::unique_ptr<BatchStaging> staging_;
  StepBuffers buf_;
  mutable DenseActivations predict_acts_;  // PredictLogits' (its batch: staging's predict slot)
  DeviceBuffer<float> dense_grad_;
  EmbeddingBackward embedding_backward_;
  DeviceBuffer<StepScalars> scalars_;
  PinnedBuffer<StepScalars> host_scalars_;
  PinnedBuffer<StepResults> results_;
  StepGraph graphs_[2];      // by staging slot
  BatchShape warm_shape_;    // the shape of the last eager step that finished enqueuing
  bool graphs_off_ = false;  // a capture failed: every step runs eagerly
  // The host's time in TrainStep: copying the batch in (what a prefetch did not), enqueuing
  // (or replaying) the step, copying the next batch ahead, waiting for the device.
  PhaseTimes<4> phases_{{"stage", "enqueue", "prefetch", "wait"}};
};

// fn(device copy, host vector) for the dense parameters and the dense optimizer's states,
// in a fixed order; sizes the device copies on first use.
template <typename Fn>
void CudaBackend::ForEachState(Fn fn) const {
  size_t k = 0;
  auto visit = [&](std::vector<float>& host) {
    if (state_.size() <= k) state_.emplace_back();
    fn(state_[k++], host);
  };
  visit(s_.model.dense_params());
  for (auto& [name, buffer] : s_.dense_optimizer->StateBuffers()) visit(*buffer);
}

std::vector<float*> CudaBackend::DenseStates() const {
  std::vector<float*> states;
  for (int i = 0; i < DenseOptimizerStateCount(config_.dense_optimizer()); ++i)
    states.push_back(state_[1 + i].get());
  return states;
}

double CudaBackend::TrainStep(const ValidatedBatch& batch, const train::StepRates& rates,
                              const train::StepLookahead& ahead) {
  std::lock_guard<std::mutex> lock(mu_);
  CheckCuda(cudaSetDevice(ordinal_), "cudaSetDevice");
  phases_.Start();
  const DeviceBatch& in = staging_->Acquire(batch, true, ahead.token);
  phases_.Lap(0);
  WriteScalars(rates);
  host_stale_ = true;  // from here the device may change its copy
  try {
    RunStep(in);
  } catch (...) {
    // What was enqueued finishes before the step's arrays, staging and scalars are reused.
    cudaStreamSynchronize(stream_);
    cudaGetLastError();
    throw;
  }
  phases_.Lap(1);
  Prefetch(ahead);  // the next batch's copy overlaps this step's compute
  phases_.Lap(2);
  CheckCuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  phases_.Lap(3);
  phases_.Step();
  const StepResults r = *results_.get();
  const double loss = r.loss_sum / static_cast<double>(batch.view.batch_size);
  // On a non-finite loss or gradient the device skipped both updates: nothing changed.
  train::CheckFinite(rates.t - 1, loss, {}, r.non_finite == 0);
  return loss;
}

void CudaBackend::Prefetch(const train::StepLookahead& ahead) {
  if (ahead.next == nullptr) return;
  try {
    staging_->Prefetch(*ahead.next, ahead.next_token);
  } catch (const std::exception& e) {
    // This step is enqueued and must finish; the next one copies its batch itself.
    staging_->CancelPrefetch();
    DLRM_LOG(kWarning) << name() << ": copying the next batch ahead failed: " << e.what();
  }
}

void CudaBackend::WriteScalars(const train::StepRates& rates) {
  StepScalars& s = *host_scalars_.get();  // the previous step's copy of it has finished
  s.dense = MakeDenseStepArgs(config_.dense_optimizer(), rates.dense_lr, rates.t);
  s.sparse = MakeSparseStepArgs(config_.sparse_optimizer(), rates.sparse_lr, rates.t);
  CheckCuda(cudaMemcpyAsync(scalars_.get(), &s, sizeof s, cudaMemcpyHostToDevice, stream_),
            "cudaMemcpyAsync (step scalars)");
}

void CudaBackend::RunStep(const DeviceBatch& in) {
  if (!config_.device().cuda_graph() || graphs_off_) return EnqueueStep(in);
  StepGraph& graph = graphs_[staging_->slot()];
  const StepGraph::Key key{in.shape, in.generation};
  if (graph.Matches(key)) return graph.Launch(stream_);
  // Once an eager step of this shape sized every buffer, capturing allocates nothing.
  if (in.shape == warm_shape_ && TryCapture(graph, key, in)) return graph.Launch(stream_);
  for (StepGraph& g : graphs_) g.Reset();  // this step may move the arrays they name
  warm_shape_ = {};                        // until this step has enqueued (and sized) everything
  EnqueueStep(in);
  warm_shape_ = in.shape;
}

bool CudaBackend::TryCapture(StepGraph& graph, const StepGraph::Key& key, const DeviceBatch& in) {
  try {
    graph.Capture(key, stream_, [&] { EnqueueStep(in); });
    return true;
  } catch (const Error& e) {
    graphs_off_ = true;
    DLRM_LOG(kWarning) << name() << ": " << e.what() << "; steps run eagerly from now on";
    return false;
  }
}

void CudaBackend::EnqueueStep(const DeviceBatch& in) {
  CheckCuda(cudaEventRecord(step_start_, stream_), "cudaEventRecord (step start)");
  net_->Forward(params(), tables_->feature_specs(), in, buf_.acts);
  dense_grad_.Resize(s_.model.dense_params().size());
  net_->Backward(params(), in, 1.0f / static_cast<float>(in.shape.batch_size), buf_.acts,
                 buf_.grads, dense_grad_.get());
  CheckStepFinite();
  // Enqueued after the backward (its arguments name d_pooled and the finite flag), but
  // waiting only for the step's start: on the device the sort runs beside the network.
  const bool sparse = !s_.model.tables().empty() && in.shape.num_ids > 0;
  const EmbeddingBackwardArgs sparse_args = SparseArgs(in);
  if (sparse) StartSort(sparse_args);
  ApplyUpdates(sparse ? &sparse_args : nullptr);
  StepResults* r = results_.get();
  CheckCuda(cudaMemcpyAsync(&r->loss_sum, buf_.grads.loss_sum.get(), sizeof(double),
                            cudaMemcpyDeviceToHost, stream_),
            "cudaMemcpyAsync (loss)");
  CheckCuda(cudaMemcpyAsync(&r->non_finite, buf_.non_finite.get(), sizeof(int32_t),
                            cudaMemcpyDeviceToHost, stream_),
            "cudaMemcpyAsync (finite flag)");
}

void CudaBackend::PredictLogits(const ValidatedBatch& batch, float* logits) const {
  std::lock_guard<std::mutex> lock(mu_);
  CheckCuda(cudaSetDevice(ordinal_), "cudaSetDevice");
  // Training's buffers stay as they are (and their graphs valid); prediction's own are
  // grown only, so a stream of batches allocates nothing once warm.
  const float* y = net_->Forward(params(), tables_->feature_specs(),
                                 staging_->AcquireForPredict(batch), predict_acts_);
  CheckCuda(cudaMemcpyAsync(logits, y, batch.view.batch_size * sizeof(float),
                            cudaMemcpyDeviceToHost, stream_),
            "cudaMemcpyAsync (logits)");
  CheckCuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
}

void CudaBackend::PullState() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (!host_stale_) return;
  CheckCuda(cudaSetDevice(ordinal_), "cudaSetDevice");
  ForEachState([&](DeviceBuffer<float>& device, std::vector<float>& host) {
    device.Download(host.data(), host.size(), stream_);
  });
  tables_->Pull(s_.model.tables(), *s_.sparse_optimizer);  // synchronizes the stream
  host_stale_ = false;
}

void CudaBackend::PushState() {
  std::lock_guard<std::mutex> lock(mu_);
  CheckCuda(cudaSetDevice(ordinal_), "cudaSetDevice");
  // Same sizes every time: the arrays (and the graphs and arguments naming them) stay put.
  ForEachState(
      [&](DeviceBuffer<float>& device, std::vector<float>& host) { device.Upload(host, stream_); });
  // Synchronizes the stream.
  tables_->Push(s_.model.tables(), *s_.sparse_optimizer, s_.model.feature_bindings(),
                CacheRowKeys());
  host_stale_ = false;
}

void CudaBackend::RowsChanged(const std::vector<ChangedRows>& changed) {
  std::lock_guard<std::mutex> lock(mu_);
  tables_->ForgetReplacedRows();  // the last step's, first: nothing below may restore them
  CheckCuda(cudaSetDevice(ordinal_), "cudaSetDevice");
  tables_->ReplaceRows(changed, s_.model.tables(), *s_.sparse_optimizer, CacheRowKeys());
}

void CudaBackend::RestoreChangedRows() {
  std::lock_guard<std::mutex> lock(mu_);
  CheckCuda(cudaSetDevice(ordinal_), "cudaSetDevice");
  tables_->RestoreRows();
}

void CudaBackend::PullRows(const ChangedRows& rows) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (!host_stale_) return;  // the host copy is current
  CheckCuda(cudaSetDevice(ordinal_), "cudaSetDevice");
  tables_->PullRows(rows, s_.model.tables(), *s_.sparse_optimizer);
}

// buf_.non_finite = how many blocks saw a NaN or infinity in the loss or a gradient.
void CudaBackend::CheckStepFinite() {
  StepBuffers& b = buf_;
  b.non_finite.Resize(1);
  CheckCuda(cudaMemsetAsync(b.non_finite.get(), 0, sizeof(int32_t), stream_), "cudaMemsetAsync");
  LaunchCountNonFinite(b.grads.loss_sum.get(), 1, b.non_finite.get(), stream_);
  LaunchCountNonFinite(dense_grad_.get(), static_cast<int64_t>(dense_grad_.size()),
                       b.non_finite.get(), stream_);
  LaunchCountNonFinite(b.grads.d_pooled.get(), static_cast<int64_t>(b.grads.d_pooled.size()),
                       b.non_finite.get(), stream_);
}

EmbeddingBackwardArgs CudaBackend::SparseArgs(const DeviceBatch& in) const {
  return tables_->SparseArgs(in, buf_.grads.d_pooled.get(), s_.model.pooled_width(),
                             buf_.non_finite.get());
}

void CudaBackend::StartSort(const EmbeddingBackwardArgs& args) {
  embedding_backward_.Prepare(args);  // every check and allocation, before the fork
  CheckCuda(cudaStreamWaitEvent(sort_stream_, step_start_, 0), "cudaStreamWaitEvent (sort)");
  try {
    embedding_backward_.Sort(args, sort_stream_);
    CheckCuda(cudaEventRecord(sorted_, sort_stream_), "cudaEventRecord (sorted)");
  } catch (...) {
    // Joined all the same, so that a capture in progress can end (and be abandoned).
    cudaEventRecord(sorted_, sort_stream_);
    cudaStreamWaitEvent(stream_, sorted_, 0);
    throw;
  }
}

// Both updates (the embedding tables' when `sparse` names the sorted batch), skipped on
// the device when CheckStepFinite counted anything. Everything that can throw (checks,
// allocation, the join of the sort) is done before the first update, so only a failed
// launch can throw once an update is enqueued. The dense update, which does not need the
// sort, gives up overlapping its tail for that.
void CudaBackend::ApplyUpdates(const EmbeddingBackwardArgs* sparse) {
  StepScalars* scalars = scalars_.get();
  if (sparse != nullptr)
    CheckCuda(cudaStreamWaitEvent(stream_, sorted_, 0), "cudaStreamWaitEvent (sorted)");
  LaunchDenseUpdate(config_.dense_optimizer(), params(), dense_grad_.get(), DenseStates(),
                    static_cast<int64_t>(dense_grad_.size()), &scalars->dense,
                    buf_.non_finite.get(), stream_);
  if (sparse != nullptr) embedding_backward_.Update(*sparse, &scalars->sparse, stream_);
}

}  // namespace

std::unique_ptr<train::Backend> MakeCudaBackend(int ordinal, train::ModelState* state,
                                                const config::DlrmConfig& config,
                                                ThreadPool* pool) {
  return std::make_unique<CudaBackend>(ordinal, state, config, pool);
}

}  // namespace dlrm::cuda

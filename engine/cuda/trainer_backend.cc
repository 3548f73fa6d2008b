#include "engine/cuda/trainer_backend.h"

#include <cuda_runtime.h>

#include <string>
#include <vector>

#include "engine/core/status.h"
#include "engine/cuda/batch_staging.h"
#include "engine/cuda/dense_network.h"
#include "engine/cuda/device.h"
#include "engine/cuda/device_buffer.h"
#include "engine/cuda/host_copy.h"

namespace dlrm::cuda {
namespace {

// `batch` without its bags: what a dense step from pooled rows stages (its ids are the
// owners' to pool, and may exceed the device's 32-bit ids).
ValidatedBatch DenseOnly(const ValidatedBatch& batch) {
  ValidatedBatch dense;
  dense.view = batch.view;
  dense.view.num_ids = 0;
  dense.view.ids = nullptr;
  dense.view.weights = nullptr;
  return dense;
}

class CudaTrainerBackend final : public train::TrainerBackend {
 public:
  CudaTrainerBackend(int ordinal, DlrmModel<float>* model, const config::DlrmConfig& config,
                     ThreadPool* pool)
      : model_(*model), pool_(pool), ordinal_(ordinal), device_(OpenDevice(ordinal)) {
    net_ = std::make_unique<DenseNetwork>(model_, stream_, PrecisionOf(config.device()));
    staging_ = std::make_unique<BatchStaging>(stream_, pool);
    rows_.resize(config.model().tables_size());
  }
  ~CudaTrainerBackend() override {
    cudaSetDevice(ordinal_);  // this thread may have another device selected
    cudaStreamSynchronize(stream_);
    staging_.reset();
    net_.reset();
  }

  std::string name() const override { return "cuda:" + std::to_string(ordinal_); }

  double ForwardBackward(const ValidatedBatch& part, int64_t global_batch,
                         std::vector<EmbeddingTable<float>>& rows, std::vector<float>* dense_grad,
                         std::vector<float>* d_pooled) override;
  void PredictLogits(const ValidatedBatch& batch, std::vector<EmbeddingTable<float>>& rows,
                     float* logits) override;
  double ForwardBackwardPooled(const ValidatedBatch& part, int64_t global_batch,
                               const float* pooled, std::vector<float>* dense_grad,
                               std::vector<float>* d_pooled) override;
  void PredictLogitsPooled(const ValidatedBatch& batch, const float* pooled,
                           float* logits) override;
  void ParametersChanged() override { params_stale_ = true; }

 private:
  // The host's parameters (if changed) and `rows` on the device, the feature specs naming
  // them; enqueued on stream_ once every table is checked (CheckRows: kInvalidArgument).
  void CopyIn(const std::vector<EmbeddingTable<float>>& rows);
  // The device selected, nothing of an earlier call in flight, the parameters current.
  void Prepare();
  // The host's pooled rows of n samples into acts_.pooled.
  void CopyPooledIn(const float* pooled, int64_t n);
  // The backward of the forward just enqueued, and its results downloaded; the loss sum.
  double BackwardAndDownload(const DeviceBatch& in, int64_t global_batch,
                             std::vector<float>* dense_grad, std::vector<float>* d_pooled);
  // The logits of the forward just enqueued into `logits` (host).
  void DownloadLogits(const float* y, int64_t n, float* logits);
  void CheckRows(const std::vector<EmbeddingTable<float>>& rows) const;
  void CopyRowsIn(const std::vector<EmbeddingTable<float>>& rows);

  DlrmModel<float>& model_;
  ThreadPool* const pool_;  // copies through the pinned buffers
  const int ordinal_;
  const DeviceInfo device_;
  const Stream stream_;
  std::unique_ptr<DenseNetwork> net_;
  std::unique_ptr<BatchStaging> staging_;
  DeviceBuffer<float> params_, dense_grad_;
  bool params_stale_ = true;
  // A table's fetched rows on the device (grown only) and the pinned buffer they pass.
  struct TableRows {
    DeviceBuffer<float> device;
    PinnedBuffer<float> pinned;
  };
  std::vector<TableRows> rows_;  // by table
  // Every transfer goes through pinned memory (host_copy.h), reused call to call: each
  // call synchronizes before it returns, so a buffer is free again at the next.
  PinnedBuffer<float> pinned_params_, pinned_grad_, pinned_d_pooled_, pinned_pooled_;
  std::vector<FeatureSpec> host_specs_;
  DeviceBuffer<FeatureSpec> specs_;
  DenseActivations acts_;
  DenseGradients grads_;
};

void CudaTrainerBackend::CopyIn(const std::vector<EmbeddingTable<float>>& rows) {
  CheckRows(rows);
  Prepare();
  CopyRowsIn(rows);
}

void CudaTrainerBackend::Prepare() {
  CheckCuda(cudaSetDevice(ordinal_), "cudaSetDevice");
  // A call that threw may have left copies in flight that still read the pinned buffers.
  CheckCuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  if (params_stale_) {
    const std::vector<float>& params = model_.dense_params();
    params_.Resize(params.size());
    CopyToDevice(pool_, params.data(), params.size(), pinned_params_, params_.get(), stream_);
    params_stale_ = false;
  }
}

void CudaTrainerBackend::CopyPooledIn(const float* pooled, int64_t n) {
  Prepare();
  const size_t count = static_cast<size_t>(n) * model_.pooled_width();
  acts_.pooled.Resize(count);
  CopyToDevice(pool_, pooled, count, pinned_pooled_, acts_.pooled.get(), stream_);
}

void CudaTrainerBackend::CheckRows(const std::vector<EmbeddingTable<float>>& rows) const {
  if (rows.size() < rows_.size())
    ThrowInvalid(name(), ": ", rows.size(), " tables of fetched rows for a model of ",
                 rows_.size());
  for (size_t t = 0; t < rows_.size(); ++t)
    if (rows[t].half() || rows[t].quantized())
      ThrowInvalid(name(), ": fetched rows of table \"", rows[t].name(), "\" are not FP32");
}

void CudaTrainerBackend::CopyRowsIn(const std::vector<EmbeddingTable<float>>& rows) {
  for (size_t t = 0; t < rows_.size(); ++t) {
    const EmbeddingTable<float>& table = rows[t];
    rows_[t].device.Reserve(table.data().size());
    CopyToDevice(pool_, table.data().data(), table.data().size(), rows_[t].pinned,
                 rows_[t].device.get(), stream_);
  }
  host_specs_.clear();
  for (const FeatureBinding& f : model_.feature_bindings())
    host_specs_.push_back(
        {rows_[f.table].device.get(), rows[f.table].dim(), f.offset, f.mean ? 1 : 0});
  specs_.Reserve(host_specs_.size());
  specs_.CopyIn(host_specs_.data(), host_specs_.size(), stream_);
}

double CudaTrainerBackend::ForwardBackward(const ValidatedBatch& part, int64_t global_batch,
                                           std::vector<EmbeddingTable<float>>& rows,
                                           std::vector<float>* dense_grad,
                                           std::vector<float>* d_pooled) {
  CopyIn(rows);
  const DeviceBatch& in = staging_->Acquire(part, /*labels=*/true, /*token=*/0);
  net_->Forward(params_.get(), specs_.get(), in, acts_);
  return BackwardAndDownload(in, global_batch, dense_grad, d_pooled);
}

double CudaTrainerBackend::ForwardBackwardPooled(const ValidatedBatch& part, int64_t global_batch,
                                                 const float* pooled,
                                                 std::vector<float>* dense_grad,
                                                 std::vector<float>* d_pooled) {
  CopyPooledIn(pooled, part.view.batch_size);
  const DeviceBatch& in = staging_->Acquire(DenseOnly(part), /*labels=*/true, /*token=*/0);
  net_->Forward(params_.get(), /*features=*/nullptr, in, acts_);
  return BackwardAndDownload(in, global_batch, dense_grad, d_pooled);
}

double CudaTrainerBackend::BackwardAndDownload(const DeviceBatch& in, int64_t global_batch,
                                               std::vector<float>* dense_grad,
                                               std::vector<float>* d_pooled) {
  dense_grad_.Resize(model_.dense_params().size());
  net_->Backward(params_.get(), in, 1.0f / static_cast<float>(global_batch), acts_, grads_,
                 dense_grad_.get());
  double loss_sum = 0;
  StartCopyToHost(dense_grad_.get(), dense_grad_.size(), pinned_grad_, stream_);
  StartCopyToHost(grads_.d_pooled.get(), grads_.d_pooled.size(), pinned_d_pooled_, stream_);
  grads_.loss_sum.Download(&loss_sum, 1, stream_);
  CheckCuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  dense_grad->resize(dense_grad_.size());
  d_pooled->resize(grads_.d_pooled.size());
  CopyFromPinned(pool_, pinned_grad_, dense_grad->size(), dense_grad->data());
  CopyFromPinned(pool_, pinned_d_pooled_, d_pooled->size(), d_pooled->data());
  return loss_sum;
}

void CudaTrainerBackend::PredictLogits(const ValidatedBatch& batch,
                                       std::vector<EmbeddingTable<float>>& rows, float* logits) {
  CopyIn(rows);
  const float* y =
      net_->Forward(params_.get(), specs_.get(), staging_->AcquireForPredict(batch), acts_);
  DownloadLogits(y, batch.view.batch_size, logits);
}

void CudaTrainerBackend::PredictLogitsPooled(const ValidatedBatch& batch, const float* pooled,
                                             float* logits) {
  CopyPooledIn(pooled, batch.view.batch_size);
  const float* y = net_->Forward(params_.get(), /*features=*/nullptr,
                                 staging_->AcquireForPredict(DenseOnly(batch)), acts_);
  DownloadLogits(y, batch.view.batch_size, logits);
}

void CudaTrainerBackend::DownloadLogits(const float* y, int64_t n, float* logits) {
  CheckCuda(cudaMemcpyAsync(logits, y, n * sizeof(float), cudaMemcpyDeviceToHost, stream_),
            "cudaMemcpyAsync (logits)");
  CheckCuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
}

}  // namespace

std::unique_ptr<train::TrainerBackend> MakeCudaTrainerBackend(int ordinal, DlrmModel<float>* model,
                                                              const config::DlrmConfig& config,
                                                              ThreadPool* pool) {
  return std::make_unique<CudaTrainerBackend>(ordinal, model, config, pool);
}

}  // namespace dlrm::cuda

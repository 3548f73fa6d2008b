#include "engine/cuda/owned_shards.h"

#include <cuda_runtime.h>

#include <string>

#include "engine/core/finite.h"
#include "engine/core/status.h"
#include "engine/cuda/batch_staging.h"
#include "engine/cuda/device.h"
#include "engine/cuda/device_buffer.h"
#include "engine/cuda/device_tables.h"
#include "engine/cuda/embedding_backward.h"
#include "engine/cuda/host_copy.h"

namespace dlrm::cuda {
namespace {

class CudaOwnedShards final : public train::OwnedShards {
 public:
  CudaOwnedShards(int ordinal, ps::EmbeddingShardStore* store, const config::DlrmConfig& config,
                  ThreadPool* pool)
      : store_(*store),
        optimizer_(config.sparse_optimizer()),
        pool_(pool),
        ordinal_(ordinal),
        device_(OpenDevice(ordinal)) {
    staging_ = std::make_unique<BatchStaging>(stream_, pool);
    tables_ = std::make_unique<DeviceTables>(stream_);
    step_args_.Resize(1);
    host_step_args_.Reserve(1);
    DeviceTables::Check(store_.shard_tables(), store_.local_features(), store_.optimizer(),
                        /*keys=*/{}, device_, FreeMemoryBytes());
    Push();
  }
  ~CudaOwnedShards() override {
    cudaSetDevice(ordinal_);  // this thread may have another device selected
    cudaStreamSynchronize(stream_);
    staging_.reset();
    tables_.reset();
  }

  std::string name() const override { return "cuda:" + std::to_string(ordinal_); }
  void Pool(const ValidatedBatch& batch, float* out) override;
  bool PooledUpdateIsFinite(const ValidatedBatch& batch, const float* d_pooled, float lr,
                            int64_t step) override;
  void ApplyPooledUpdate(const float* d_pooled, float lr, int64_t step) override;
  void PullState() override;
  // The store is the truth from here: what the device trained before is not copied back.
  void StoreChanged() override {
    device_stale_ = true;
    host_stale_ = false;
  }

 private:
  // The device selected and its copy of the store current.
  void Prepare();
  void Push();
  // `batch` on the device (the one staged last if it has the same shape: Pool's).
  const DeviceBatch& Staged(const ValidatedBatch& batch);
  size_t PooledCount(int64_t batch_size) const {
    return static_cast<size_t>(batch_size) * static_cast<size_t>(store_.pooled_width());
  }

  ps::EmbeddingShardStore& store_;
  const config::SparseOptimizerConfig optimizer_;
  ThreadPool* const pool_;
  const int ordinal_;
  const DeviceInfo device_;
  const Stream stream_;
  std::unique_ptr<BatchStaging> staging_;
  std::unique_ptr<DeviceTables> tables_;
  EmbeddingBackward backward_;
  const DeviceBatch* staged_ = nullptr;  // the prediction slot, as Pool left it
  const float* uploaded_ = nullptr;      // the host gradient d_pooled_ holds
  DeviceBuffer<float> pooled_, d_pooled_;
  PinnedBuffer<float> pinned_pooled_, pinned_d_pooled_;
  DeviceBuffer<SparseStepArgs> step_args_;
  PinnedBuffer<SparseStepArgs> host_step_args_;
  bool device_stale_ = false;  // the store was written since Push
  bool host_stale_ = false;    // the device trained since Push or PullState
};

void CudaOwnedShards::Prepare() {
  CheckCuda(cudaSetDevice(ordinal_), "cudaSetDevice");
  if (device_stale_) Push();
}

void CudaOwnedShards::Push() {
  tables_->Push(store_.shard_tables(), store_.optimizer(), store_.local_features(),
                /*keys=*/{});  // no SSD tables in a trainer's store
  device_stale_ = host_stale_ = false;
}

void CudaOwnedShards::PullState() {
  if (!host_stale_) return;
  CheckCuda(cudaSetDevice(ordinal_), "cudaSetDevice");
  tables_->Pull(store_.mutable_shard_tables(), store_.optimizer());
  host_stale_ = false;
}

const DeviceBatch& CudaOwnedShards::Staged(const ValidatedBatch& batch) {
  if (staged_ == nullptr || staged_->shape != ShapeOf(batch.view, false))
    staged_ = &staging_->AcquireForPredict(batch);
  return *staged_;
}

void CudaOwnedShards::Pool(const ValidatedBatch& batch, float* out) {
  if (store_.local_features().empty()) return;  // no shards here: rows of no columns
  Prepare();
  staged_ = &staging_->AcquireForPredict(batch);
  const size_t count = PooledCount(batch.view.batch_size);
  pooled_.Reserve(count);
  tables_->Pool(*staged_, pooled_.get(), store_.pooled_width());
  StartCopyToHost(pooled_.get(), count, pinned_pooled_, stream_);
  CheckCuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  CopyFromPinned(pool_, pinned_pooled_, count, out);
}

bool CudaOwnedShards::PooledUpdateIsFinite(const ValidatedBatch& batch, const float* d_pooled,
                                           float /*lr*/, int64_t /*step*/) {
  uploaded_ = nullptr;
  if (store_.local_features().empty()) return true;
  const size_t count = PooledCount(batch.view.batch_size);
  FiniteCheck<float> finite;
  for (size_t i = 0; i < count; ++i) finite.Add(d_pooled[i]);
  if (!finite.ok()) return false;
  Prepare();
  Staged(batch);
  d_pooled_.Reserve(count);
  CopyToDevice(pool_, d_pooled, count, pinned_d_pooled_, d_pooled_.get(), stream_);
  CheckCuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");  // pinned reusable
  uploaded_ = d_pooled;
  return true;
}

void CudaOwnedShards::ApplyPooledUpdate(const float* d_pooled, float lr, int64_t step) {
  if (store_.local_features().empty()) return;
  // d_pooled is on the device since PooledUpdateIsFinite (same batch, same gradient).
  DLRM_INTERNAL_CHECK(staged_ != nullptr && uploaded_ == d_pooled);
  Prepare();
  if (staged_->shape.num_ids == 0) return;
  *host_step_args_.get() = MakeSparseStepArgs(optimizer_, lr, step);
  CheckCuda(cudaMemcpyAsync(step_args_.get(), host_step_args_.get(), sizeof(SparseStepArgs),
                            cudaMemcpyHostToDevice, stream_),
            "cudaMemcpyAsync (step scalars)");
  const EmbeddingBackwardArgs args =
      tables_->SparseArgs(*staged_, d_pooled_.get(), store_.pooled_width(), nullptr);
  backward_.Prepare(args);
  host_stale_ = true;  // from here the device may change its copy
  backward_.Sort(args, stream_);
  backward_.Update(args, step_args_.get(), stream_);
  CheckCuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
}

}  // namespace

std::unique_ptr<train::OwnedShards> MakeCudaOwnedShards(int ordinal, ps::EmbeddingShardStore* store,
                                                        const config::DlrmConfig& config,
                                                        ThreadPool* pool) {
  return std::make_unique<CudaOwnedShards>(ordinal, store, config, pool);
}

}  // namespace dlrm::cuda

// The trainers' device seam checked without a device (trainer_backend.h): a backend that
// computes on a copy of the dense parameters, as a GPU backend does.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "engine/config/dlrm.pb.h"
#include "engine/core/thread_pool.h"
#include "engine/data/batch.h"
#include "engine/embedding/embedding_bag.h"
#include "engine/embedding/embedding_table.h"
#include "engine/model/dlrm_model.h"
#include "engine/train/trainer_backend.h"

namespace dlrm::testing {

// A backend that computes on a copy of the dense parameters refreshed only when the trainer
// says they changed, as a device backend does (cuda/trainer_backend.h): the trainer's side of
// that contract, checked without a GPU. It counts the refreshes.
class CopyingBackend final : public train::TrainerBackend {
 public:
  CopyingBackend(const config::DlrmConfig& c, const DlrmModel<float>* host, ThreadPool* pool,
                 int* refreshes)
      : host_(*host),
        own_(c, pool, /*allocate_tables=*/false),
        pool_(pool),
        refreshes_(refreshes) {}
  std::string name() const override { return "copying"; }
  double ForwardBackward(const ValidatedBatch& part, int64_t global_batch,
                         std::vector<EmbeddingTable<float>>& rows, std::vector<float>* dense_grad,
                         std::vector<float>* d_pooled) override {
    Refresh();
    const EmbeddingBagCollection<float> bags(&rows, own_.feature_bindings(), own_.pooled_width());
    return own_.ForwardBackwardPart(part, global_batch, bags, dense_grad, d_pooled, pool_);
  }
  void PredictLogits(const ValidatedBatch& batch, std::vector<EmbeddingTable<float>>& rows,
                     float* logits) override {
    Refresh();
    const EmbeddingBagCollection<float> bags(&rows, own_.feature_bindings(), own_.pooled_width());
    own_.PredictLogits(batch, bags, logits, pool_);
  }
  double ForwardBackwardPooled(const ValidatedBatch& part, int64_t global_batch,
                               const float* pooled, std::vector<float>* dense_grad,
                               std::vector<float>* d_pooled) override {
    Refresh();
    return own_.ForwardBackwardPooled(part, global_batch, pooled, dense_grad, d_pooled, pool_);
  }
  void PredictLogitsPooled(const ValidatedBatch& batch, const float* pooled,
                           float* logits) override {
    Refresh();
    own_.PredictLogitsPooled(batch, pooled, logits, pool_);
  }
  void ParametersChanged() override { stale_ = true; }

 private:
  void Refresh() {
    if (!stale_) return;
    own_.dense_params() = host_.dense_params();
    stale_ = false;
    ++*refreshes_;
  }

  const DlrmModel<float>& host_;
  DlrmModel<float> own_;
  ThreadPool* pool_;
  int* refreshes_;
  bool stale_ = true;
};

}  // namespace dlrm::testing

#include "engine/train/trainer_backend.h"

#include "engine/core/status.h"
#include "engine/embedding/embedding_bag.h"

namespace dlrm::train {
namespace {

class CpuTrainerBackend final : public TrainerBackend {
 public:
  CpuTrainerBackend(DlrmModel<float>* model, ThreadPool* pool) : model_(*model), pool_(pool) {}

  std::string name() const override { return "cpu"; }

  double ForwardBackward(const ValidatedBatch& part, int64_t global_batch,
                         std::vector<EmbeddingTable<float>>& rows, std::vector<float>* dense_grad,
                         std::vector<float>* d_pooled) override {
    const EmbeddingBagCollection<float> bags(&rows, model_.feature_bindings(),
                                             model_.pooled_width());
    return model_.ForwardBackwardPart(part, global_batch, bags, dense_grad, d_pooled, pool_);
  }

  void PredictLogits(const ValidatedBatch& batch, std::vector<EmbeddingTable<float>>& rows,
                     float* logits) override {
    const EmbeddingBagCollection<float> bags(&rows, model_.feature_bindings(),
                                             model_.pooled_width());
    model_.PredictLogits(batch, bags, logits, pool_);
  }

  double ForwardBackwardPooled(const ValidatedBatch& part, int64_t global_batch,
                               const float* pooled, std::vector<float>* dense_grad,
                               std::vector<float>* d_pooled) override {
    return model_.ForwardBackwardPooled(part, global_batch, pooled, dense_grad, d_pooled, pool_);
  }

  void PredictLogitsPooled(const ValidatedBatch& batch, const float* pooled,
                           float* logits) override {
    model_.PredictLogitsPooled(batch, pooled, logits, pool_);
  }

  void ParametersChanged() override {}

 private:
  DlrmModel<float>& model_;
  ThreadPool* pool_;
};

}  // namespace

std::unique_ptr<TrainerBackend> MakeCpuTrainerBackend(DlrmModel<float>* model, ThreadPool* pool) {
  return std::make_unique<CpuTrainerBackend>(model, pool);
}

std::unique_ptr<TrainerBackend> MakeTrainerBackend(const TrainerBackendFactory& factory,
                                                   const config::DlrmConfig& config,
                                                   DlrmModel<float>* model, ThreadPool* pool) {
  if (factory) return factory(config, model, pool);
  RequireHostDevice(config, "dense step");
  return MakeCpuTrainerBackend(model, pool);
}

}  // namespace dlrm::train

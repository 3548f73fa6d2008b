#include <vector>

#include "engine/config/config.h"
#include "engine/core/finite.h"
#include "engine/train/backend.h"

namespace dlrm::train {
namespace {

// The rows of each table that hold optimizer state (StateRows: an SSD table's cache rows,
// none of a quantized table's).
std::vector<TableShape> TableShapes(const config::DlrmConfig& config) {
  std::vector<TableShape> shapes;
  for (int t = 0; t < config.model().tables_size(); ++t)
    shapes.push_back({StateRows(config, t), config.model().tables(t).dim()});
  return shapes;
}

class CpuBackend : public Backend {
 public:
  CpuBackend(ModelState* state, ThreadPool* pool) : s_(*state), pool_(pool) {}

  std::string name() const override { return "cpu"; }

  double TrainStep(const ValidatedBatch& batch, const StepRates& rates,
                   const StepLookahead& /*lookahead*/) override {
    phases_.Start();
    const double loss = s_.model.ForwardBackward(batch, &dense_grad_, &d_pooled_, pool_);
    phases_.Lap(0);
    CheckFinite(rates.t - 1, loss, dense_grad_, AllFinite(d_pooled_));
    // Both updates are checked before either writes: a step that fails changes nothing.
    const bool finite = DenseUpdateIsFinite(*s_.dense_optimizer, s_.model.dense_params(),
                                            dense_grad_.data(), rates, pool_) &&
                        s_.model.SparseUpdateIsFinite(batch, d_pooled_, *s_.sparse_optimizer,
                                                      rates.sparse_lr, rates.t, pool_);
    if (!finite) ThrowUpdateNotFinite(rates);
    phases_.Lap(1);
    UpdateDense(*s_.dense_optimizer, s_.model.dense_params(), dense_grad_.data(), rates, pool_);
    s_.model.ApplySparseUpdate(d_pooled_, *s_.sparse_optimizer, rates.sparse_lr, rates.t, pool_);
    phases_.Lap(2);
    phases_.Step();
    return loss;
  }

  StepPhases Phases() const override { return phases_.Read(); }

  void PredictLogits(const ValidatedBatch& batch, float* logits) const override {
    s_.model.PredictLogits(batch, logits, pool_);
  }

  void PullState() const override {}
  void PushState() override {}
  void RowsChanged(const std::vector<ChangedRows>&) override {}
  void RestoreChangedRows() override {}
  void PullRows(const ChangedRows&) const override {}

 private:
  ModelState& s_;
  ThreadPool* pool_;
  // Reused across steps.
  std::vector<float> dense_grad_;
  std::vector<float> d_pooled_;
  PhaseTimes<3> phases_{{"forward_backward", "finite_checks", "updates"}};
};

}  // namespace

ModelState::ModelState(const config::DlrmConfig& config, ThreadPool* pool)
    : model(config, pool),
      dense_optimizer(
          MakeDenseOptimizer<float>(config.dense_optimizer(), model.dense_params().size())),
      sparse_optimizer(MakeSparseOptimizer<float>(config.sparse_optimizer(), TableShapes(config))),
      dynamic_tables(config) {}

std::unique_ptr<Backend> MakeCpuBackend(ModelState* state, ThreadPool* pool) {
  return std::make_unique<CpuBackend>(state, pool);
}

}  // namespace dlrm::train

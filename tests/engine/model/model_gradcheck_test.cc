// Whole-model gradient check: the analytic gradients of the mean BCE loss w.r.t. every
// dense parameter and every touched embedding entry agree with central finite
// differences, computed by the same model code instantiated in double.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "engine/config/config.h"
#include "engine/model/dlrm_model.h"
#include "tests/support/test_support.h"

namespace dlrm {
namespace {

// Records the summed row gradients the fused backward hands to the optimizer.
class GradientCapture : public SparseOptimizer<double> {
 public:
  void UpdateRow(int32_t table, int64_t row, double*, const double* grad, int32_t dim, float,
                 int64_t) override {
    std::lock_guard<std::mutex> lock(mu_);
    auto [it, inserted] =
        grads.emplace(std::make_pair(table, row), std::vector<double>(grad, grad + dim));
    EXPECT_TRUE(inserted) << "row updated twice in one step: " << table << "/" << row;
  }
  std::vector<std::pair<std::string, std::vector<double>*>> StateBuffers(int32_t) override {
    return {};
  }
  bool RowUpdateIsFinite(int32_t, int64_t, const double*, const double*, int32_t, float,
                         int64_t) const override {
    return true;  // writes nothing either way
  }
  bool HasRowState() const override { return false; }
  void PrefetchState(int32_t, int64_t) const override {}
  void ResetRow(int32_t, int64_t) override { ADD_FAILURE() << "no row is reset in this test"; }

  std::map<std::pair<int32_t, int64_t>, std::vector<double>> grads;

 private:
  std::mutex mu_;
};

double Loss(DlrmModel<double>& model, const ValidatedBatch& batch) {
  std::vector<double> g, d;
  return model.ForwardBackward(batch, &g, &d, nullptr);
}

void ExpectClose(double analytic, double numeric, const std::string& what) {
  const double tolerance = 1e-6 * std::max(1.0, std::abs(numeric)) + 1e-8;
  EXPECT_NEAR(analytic, numeric, tolerance) << what;
}

void CheckModel(const std::string& config_text, bool weighted) {
  const config::DlrmConfig config = ParseConfigText(config_text);
  ValidateConfig(config);
  DlrmModel<double> model(config);
  const OwnedBatch batch = testing::SmallBatch(20, 11, weighted);
  const ValidatedBatch vb = ValidateBatch(batch.view(), 4, model.feature_specs(), true);
  ThreadPool pool(2);
  std::vector<double> dense_grad, d_pooled;
  model.ForwardBackward(vb, &dense_grad, &d_pooled, &pool);
  GradientCapture capture;
  model.SparseBackwardAndUpdate(vb, d_pooled, capture, 1.0f, 1, &pool);

  const double h = 1e-6;
  auto& params = model.dense_params();
  ASSERT_EQ(dense_grad.size(), params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    const double saved = params[i];
    params[i] = saved + h;
    const double up = Loss(model, vb);
    params[i] = saved - h;
    const double down = Loss(model, vb);
    params[i] = saved;
    ExpectClose(dense_grad[i], (up - down) / (2 * h), "dense parameter " + std::to_string(i));
  }

  auto& tables = model.tables();
  int checked_rows = 0;
  for (size_t t = 0; t < tables.size(); ++t) {
    for (int64_t r = 0; r < tables[t].num_rows(); ++r) {
      auto it = capture.grads.find({static_cast<int32_t>(t), r});
      for (int32_t k = 0; k < tables[t].dim(); ++k) {
        double& w = tables[t].row(r)[k];
        const double saved = w;
        w = saved + h;
        const double up = Loss(model, vb);
        w = saved - h;
        const double down = Loss(model, vb);
        w = saved;
        const double numeric = (up - down) / (2 * h);
        const double analytic = it == capture.grads.end() ? 0.0 : it->second[k];
        ExpectClose(analytic, numeric, "table " + std::to_string(t) + " row " + std::to_string(r));
      }
      if (it != capture.grads.end()) ++checked_rows;
    }
  }
  EXPECT_GT(checked_rows, 10);
}

TEST(ModelGradcheckTest, DotInteraction) { CheckModel(testing::SmallConfigText(), false); }

TEST(ModelGradcheckTest, DotInteractionWeightedBags) {
  CheckModel(testing::SmallConfigText(), true);
}

TEST(ModelGradcheckTest, DotInteractionWithSelfInteraction) {
  std::string text = testing::SmallConfigText();
  text.insert(text.find("bottom_mlp"), "dot_self_interaction: true\n  ");
  CheckModel(text, true);
}

TEST(ModelGradcheckTest, CatInteraction) {
  std::string text = testing::SmallConfigText();
  text.replace(text.find("layer_sizes: 8 layer_sizes: 4 }"), 31, "layer_sizes: 8 layer_sizes: 5 }");
  text.insert(text.find("bottom_mlp"), "interaction: CAT\n  ");
  CheckModel(text, true);
}

// DCNv2 (issue 16): the cross network between the concatenation and the top MLP, low rank
// and full rank, in the whole model's gradient: every dense parameter (the cross layers'
// included) and every touched embedding row.
TEST(ModelGradcheckTest, DcnInteraction) {
  for (const char* dcn : {"dcn { num_layers: 2 rank: 3 }", "dcn { num_layers: 1 }"}) {
    std::string text = testing::SmallConfigText();
    text.insert(text.find("bottom_mlp"), std::string("interaction: DCN ") + dcn + "\n  ");
    CheckModel(text, true);
    const DlrmModel<double> model(ParseConfigText(text));
    ASSERT_NE(model.cross_net(), nullptr);
    EXPECT_EQ(model.cross_net()->dim(), 16);  // bottom 4 + three features of dim 4
  }
}

TEST(ModelGradcheckTest, ForwardIsIndependentOfChunking) {
  // A sample's forward does not depend on which chunk it falls in (up to rounding).
  const OwnedBatch batch = testing::SmallBatch(30, 5);
  std::vector<double> reference;
  for (int chunk : {1, 7, 64}) {
    DlrmModel<double> model(ParseConfigText(testing::SmallConfigText("", 1, chunk)));
    const ValidatedBatch vb = ValidateBatch(batch.view(), 4, model.feature_specs(), true);
    std::vector<double> logits(30);
    model.PredictLogits(vb, logits.data(), nullptr);
    if (reference.empty()) reference = logits;
    for (size_t i = 0; i < logits.size(); ++i) EXPECT_NEAR(logits[i], reference[i], 1e-12) << chunk;
  }
}

}  // namespace
}  // namespace dlrm

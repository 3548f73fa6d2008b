// Evaluation metrics over a set of (score, label) pairs.
#pragma once

#include <cstdint>
#include <vector>

namespace dlrm {

// What evaluating a model on labelled batches gives.
struct EvalResult {
  double log_loss = 0;
  double auc = 0;
  int64_t num_samples = 0;
};

// The metrics of predicted probabilities against labels.
EvalResult Evaluation(const std::vector<double>& probabilities, const std::vector<float>& labels);

// Area under the ROC curve, exact: ranks by score with tied scores sharing their mean
// rank (Mann-Whitney U). Labels are thresholded at 0.5. Returns NaN when only one class
// is present, or when a score is NaN (it has no rank).
double RocAuc(const std::vector<double>& scores, const std::vector<float>& labels);

// Mean binary cross-entropy of probabilities, clamped to [1e-12, 1 - 1e-12].
double LogLoss(const std::vector<double>& probabilities, const std::vector<float>& labels);

}  // namespace dlrm

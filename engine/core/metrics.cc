#include "engine/core/metrics.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "engine/core/status.h"

namespace dlrm {

double RocAuc(const std::vector<double>& scores, const std::vector<float>& labels) {
  if (scores.size() != labels.size())
    ThrowInvalid("RocAuc: ", scores.size(), " scores but ", labels.size(), " labels");
  // A NaN has no rank (and NaN != NaN would never close its run of ties below).
  for (const double s : scores)
    if (std::isnan(s)) return std::numeric_limits<double>::quiet_NaN();
  const size_t n = scores.size();
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return scores[a] < scores[b]; });
  double positive_rank_sum = 0;
  double positives = 0;
  for (size_t i = 0; i < n;) {
    size_t j = i;
    while (j < n && scores[order[j]] == scores[order[i]]) ++j;
    const double mean_rank = 0.5 * (static_cast<double>(i + 1) + static_cast<double>(j));
    for (size_t k = i; k < j; ++k) {
      if (labels[order[k]] >= 0.5f) {
        positive_rank_sum += mean_rank;
        positives += 1;
      }
    }
    i = j;
  }
  const double negatives = static_cast<double>(n) - positives;
  if (positives == 0 || negatives == 0) return std::numeric_limits<double>::quiet_NaN();
  return (positive_rank_sum - positives * (positives + 1) / 2) / (positives * negatives);
}

double LogLoss(const std::vector<double>& probabilities, const std::vector<float>& labels) {
  if (probabilities.size() != labels.size())
    ThrowInvalid("LogLoss: ", probabilities.size(), " probabilities but ", labels.size(),
                 " labels");
  if (probabilities.empty()) return std::numeric_limits<double>::quiet_NaN();
  double sum = 0;
  for (size_t i = 0; i < probabilities.size(); ++i) {
    const double p = std::min(std::max(probabilities[i], 1e-12), 1.0 - 1e-12);
    const double y = labels[i];
    sum -= y * std::log(p) + (1 - y) * std::log(1 - p);
  }
  return sum / static_cast<double>(probabilities.size());
}

EvalResult Evaluation(const std::vector<double>& probabilities, const std::vector<float>& labels) {
  EvalResult result;
  result.num_samples = static_cast<int64_t>(labels.size());
  result.log_loss = LogLoss(probabilities, labels);
  result.auc = RocAuc(probabilities, labels);
  return result;
}

}  // namespace dlrm

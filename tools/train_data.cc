#include "tools/train_data.h"

#include <cstdio>
#include <fstream>
#include <utility>

#include "engine/config/config.h"
#include "engine/core/status.h"

namespace dlrm::tools {

CriteoOptions ReaderOptions(const config::DlrmConfig& config, int64_t batch_size,
                            bool skip_malformed) {
  const config::ModelConfig& model = config.model();
  if (model.num_dense_features() != CriteoTsvReader::kNumDense ||
      model.sparse_features_size() != CriteoTsvReader::kNumSparse)
    ThrowInvalid("Criteo TSV has 13 dense and 26 sparse features, but the config has ",
                 model.num_dense_features(), " and ", model.sparse_features_size());
  CriteoOptions options;
  options.batch_size = batch_size;
  options.on_malformed = skip_malformed ? MalformedPolicy::kSkip : MalformedPolicy::kError;
  for (const auto& feature : model.sparse_features())
    options.table_rows.push_back(model.tables(FindTable(model, feature.table())).num_rows());
  return options;
}

std::vector<OwnedBatch> LoadBatches(const std::string& path, const config::DlrmConfig& config,
                                    int64_t batch_size, bool skip_malformed) {
  CriteoTsvReader reader(path, ReaderOptions(config, batch_size, skip_malformed));
  std::vector<OwnedBatch> batches;
  OwnedBatch batch;
  while (reader.Next(&batch)) batches.push_back(std::move(batch));
  if (batches.empty()) ThrowInvalid("\"", path, "\" holds no samples");
  return batches;
}

void ReportEval(const std::string& path, const EvalResult& result) {
  std::printf("eval %s: samples=%lld log_loss=%.6f auc=%.6f\n", path.c_str(),
              static_cast<long long>(result.num_samples), result.log_loss, result.auc);
  std::ifstream bayes(path + ".bayes_auc");
  double bayes_auc = 0;
  if (bayes >> bayes_auc)
    std::printf("bayes_optimal_auc=%.6f gap=%.6f\n", bayes_auc, bayes_auc - result.auc);
  std::fflush(stdout);
}

}  // namespace dlrm::tools

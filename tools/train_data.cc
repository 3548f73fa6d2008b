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
  for (const auto& feature : model.sparse_features()) {
    const config::TableConfig& table = model.tables(FindTable(model, feature.table()));
    options.table_rows.push_back(table.kind() == config::TableConfig::DYNAMIC ? kRawIds
                                                                              : table.num_rows());
  }
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

namespace {

// One line per DYNAMIC table (ssd false) or SSD table (ssd true: its cache's counts), then
// their total.
void ReportTables(const Engine& engine, bool ssd) {
  DynamicRowsStats total;
  int tables = 0;
  for (const auto& table : engine.config().model().tables()) {
    if (ssd ? !table.has_ssd() : table.kind() != config::TableConfig::DYNAMIC) continue;
    const TableStats s = engine.GetTableStats(table.name());
    const auto& c = s.counts;
    std::printf(
        "table %s: size=%lld capacity=%lld hit_rate=%.4f admitted=%lld evicted=%lld "
        "rejected=%lld\n",
        table.name().c_str(), static_cast<long long>(s.size), static_cast<long long>(s.capacity),
        c.lookups > 0 ? static_cast<double>(c.hits) / static_cast<double>(c.lookups) : 0.0,
        static_cast<long long>(c.admitted), static_cast<long long>(c.evicted),
        static_cast<long long>(c.rejected));
    total.lookups += c.lookups, total.hits += c.hits, total.admitted += c.admitted;
    total.evicted += c.evicted, total.rejected += c.rejected, ++tables;
  }
  if (tables == 0) return;
  std::printf("%s tables: %d hit_rate=%.4f admitted=%lld evicted=%lld rejected=%lld\n",
              ssd ? "ssd" : "dynamic", tables,
              total.lookups > 0 ? static_cast<double>(total.hits) / static_cast<double>(total.lookups)
                                : 0.0,
              static_cast<long long>(total.admitted), static_cast<long long>(total.evicted),
              static_cast<long long>(total.rejected));
}

}  // namespace

void ReportDynamicTables(const Engine& engine) {
  ReportTables(engine, false);
  ReportTables(engine, true);
  std::fflush(stdout);
}

}  // namespace dlrm::tools

// Criteo TSV input and evaluation output shared by `dlrm train` in one process and in a
// multi-process job.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/config/dlrm.pb.h"
#include "engine/core/metrics.h"
#include "engine/data/batch.h"
#include "engine/data/criteo_tsv.h"
#include "engine/engine.h"

namespace dlrm::tools {

// Reader options for a config's tables; kInvalidArgument when the config does not have
// Criteo's 13 dense and 26 sparse features.
CriteoOptions ReaderOptions(const config::DlrmConfig& config, int64_t batch_size,
                            bool skip_malformed);

// Every batch of a TSV file (evaluation data); kInvalidArgument if it holds no samples.
std::vector<OwnedBatch> LoadBatches(const std::string& path, const config::DlrmConfig& config,
                                    int64_t batch_size, bool skip_malformed);

// "eval PATH: samples=N log_loss=X auc=Y", plus the gap to PATH.bayes_auc if present.
void ReportEval(const std::string& path, const EvalResult& result);

// One line per DYNAMIC table: "table NAME: size=.. capacity=.. hit_rate=.. admitted=..
// evicted=.. rejected=..", then their totals ("dynamic tables: N ..."); the same for SSD
// tables, with their caches' counts ("ssd tables: N ..."); nothing for FIXED tables in DRAM.
void ReportDynamicTables(const Engine& engine);

}  // namespace dlrm::tools

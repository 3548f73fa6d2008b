// Reading and validating the engine configuration (schema: dlrm.proto).
#pragma once

#include <string>

#include "engine/config/dlrm.pb.h"

namespace dlrm {

// Parses protobuf text format. Throws dlrm::Error(kInvalidArgument) with the line, column
// and parser message on a syntax error or unknown field.
config::DlrmConfig ParseConfigText(const std::string& text);

// Reads and parses a text config file; kIo naming the path if it cannot be read.
config::DlrmConfig LoadConfigFile(const std::string& path);

// Checks every field; throws dlrm::Error(kInvalidArgument) naming the field path and the
// reason, e.g. "model.tables[2].dim must be > 0, got 0".
void ValidateConfig(const config::DlrmConfig& config);

std::string ConfigToText(const config::DlrmConfig& config);

// config less what each process chooses for itself, which is memory and placement, not
// the model: num_threads, device, memory_limit_bytes, ssd_dir and every SSD table's
// cache_bytes and segment_bytes. The peers of a multi-process job share the rest
// (cluster/job_config.h), and a checkpoint loads under any values of these
// (checkpoint::CompareConfigs).
config::DlrmConfig WithoutPerProcessFields(const config::DlrmConfig& config);

// Sets *device from a name: "cpu", "cuda" (ordinal 0) or "cuda:N", strictly; otherwise
// kInvalidArgument "<what> must be cpu, cuda or cuda:N, got '<name>'". A CPU device keeps
// no CUDA setting; a CUDA one keeps its cuda_graph.
void SetDeviceByName(const std::string& name, const std::string& what,
                     config::DeviceConfig* device);

// Hyperparameter checks the optimizers share: kInvalidArgument
// "<field> must be finite and >= 0 / finite and > 0 / in [0, 1), got <value>".
void RequireNonNegative(const std::string& field, float value);
// eps-like values: > 0 keeps a division by (sqrt(0) + eps) finite.
void RequirePositive(const std::string& field, float value);
void RequireUnitInterval(const std::string& field, float value);
// Learning rates, wherever they come from (config, SetLearningRate, a checkpoint).
bool IsValidLearningRate(double lr);

// The most rows a DYNAMIC table may give ids (its id index's capacity).
inline constexpr int64_t kMaxDynamicTableRows = int64_t{1} << 40;

// DistributedConfig.wire_precision as the precision of the values that travel: FP32,
// BF16 or FP16 (half_row.h's formats).
config::TableConfig::Precision WireValuePrecision(const config::DistributedConfig& d);

// For the parts that train (or plan) tables: kInvalidArgument "model.tables[i] ("name")
// has precision INT8 (a quantized serving table), which <who> does not take yet" for a
// quantized table. FP32, BF16 and FP16 rows are taken.
void RequireTrainableRows(const config::ModelConfig& model, const char* who);
// For the parts that train FIXED tables held in memory (embedding servers, trainers'
// shards): RequireTrainableRows, then kInvalidArgument "model.tables[i] ("name") is
// DYNAMIC (or: has ssd storage), which <who> does not take yet".
void RequireFixedTables(const config::ModelConfig& model, const char* who);

// config.memory_limit_bytes, else MachineMemoryBytes (core/machine_memory.h); 0 when
// nothing is known. *source names which ("memory_limit_bytes", "physical memory",
// "cgroup memory.max").
int64_t MemoryLimitBytes(const config::DlrmConfig& config, std::string* source);
// The memory checks' one rule and message: kResourceExhausted "<who> needs <bytes>
// bytes<parts>, but <source> is <limit> bytes<advice>" when `bytes` exceed that limit less
// `reserved` (what something else already holds there); nothing when no limit is known.
void CheckFitsMemory(const config::DlrmConfig& config, const std::string& who, int64_t bytes,
                     const std::string& parts, int64_t reserved = 0,
                     const std::string& advice = "");

// TableConfig.precision's kinds: row-wise quantized codes (INT8, INT4, read-only serving
// rows) and 16-bit floats (BF16, FP16, trainable).
bool IsQuantized(config::TableConfig::Precision precision);
bool IsHalf(config::TableConfig::Precision precision);
// Bytes of one value of an FP32, BF16 or FP16 table's rows (4, 2, 2); a quantized table's
// rows are StoredRowBytes (engine/embedding/quantized_row.h).
int64_t ValueBytes(config::TableConfig::Precision precision);

// Bytes of sparse optimizer state per row of a table of `dim` (0 for SGD).
int64_t SparseStateBytesPerRow(const config::SparseOptimizerConfig& optimizer, int32_t dim);
// Bytes a row of `cols` values at `precision` (FP32, BF16 or FP16) takes in memory: its
// weights and the optimizer's state. The one formula of a row's memory (the budget, the
// SSD caches, the shard planner's cost model).
int64_t RowBytes(const config::SparseOptimizerConfig& optimizer,
                 config::TableConfig::Precision precision, int32_t cols);
// RowBytes of a whole row of `table` under config's sparse optimizer.
int64_t RowBytes(const config::DlrmConfig& config, const config::TableConfig& table);

// An optimizer's kind as the config names it: "sgd" (also when none is set), "adagrad",
// "rowwise_adagrad", "adam".
std::string OptimizerName(const config::DenseOptimizerConfig& optimizer);
std::string OptimizerName(const config::SparseOptimizerConfig& optimizer);

// Index of the table with this name, or -1.
int FindTable(const config::ModelConfig& model, const std::string& name);

// The staleness bound the embedding owners keep: 0 for SYNC, `staleness` for HYBRID.
int64_t StalenessBound(const config::DistributedConfig& distributed);

// Steps ahead whose lookups a trainer keeps in flight: `lookahead` if set, else 1 for SYNC
// and the staleness bound (at most 64) for HYBRID.
int32_t Lookahead(const config::DistributedConfig& distributed);

}  // namespace dlrm

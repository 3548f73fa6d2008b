#include "engine/config/config.h"

#include <google/protobuf/text_format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>

#include "engine/config/text_proto.h"
#include "engine/core/machine_memory.h"
#include "engine/core/status.h"

namespace dlrm {
namespace {

// Far above any machine's GPU count; a larger ordinal is a typo, not a device.
constexpr int32_t kMaxDeviceOrdinal = 1023;

std::string Field(const std::string& repeated, int index) {
  return repeated + "[" + std::to_string(index) + "]";
}

void CheckLearningRate(const std::string& field, float lr) {
  if (!IsValidLearningRate(lr)) ThrowInvalid(field, " must be finite and >= 0, got ", lr);
}

void ValidateInitializer(const std::string& field, const config::Initializer& init) {
  switch (init.kind()) {
    case config::Initializer::UNIFORM:
      if (!(init.low() < init.high()))
        ThrowInvalid(field, ".low must be < ", field, ".high, got low=", init.low(),
                     " high=", init.high());
      break;
    case config::Initializer::NORMAL:
      if (!(init.stddev() >= 0) || !std::isfinite(init.mean()))
        ThrowInvalid(field, ".stddev must be >= 0 and mean finite, got mean=", init.mean(),
                     " stddev=", init.stddev());
      break;
    default: break;
  }
}

void ValidateDynamicTable(const std::string& field, const config::TableConfig& table) {
  if (table.kind() != config::TableConfig::DYNAMIC) {
    if (table.has_dynamic()) ThrowInvalid(field, ".dynamic is set but ", field, ".kind is FIXED");
    return;
  }
  const config::DynamicTableConfig& d = table.dynamic();
  const bool default_row = d.unadmitted() == config::DynamicTableConfig::DEFAULT_ROW;
  if (table.num_rows() > kMaxDynamicTableRows + (default_row ? 1 : 0))
    ThrowInvalid(field, ".num_rows of a DYNAMIC table must be at most 2^40 (ids' rows), got ",
                 table.num_rows());
  if (default_row && table.num_rows() < 2)
    ThrowInvalid(field,
                 ".num_rows must be >= 2 with dynamic.unadmitted DEFAULT_ROW (one row is "
                 "the default), got ",
                 table.num_rows());
  if (d.ttl_steps() < 0)
    ThrowInvalid(field, ".dynamic.ttl_steps must be >= 0, got ", d.ttl_steps());
  if (d.eviction() == config::DynamicTableConfig::TTL && d.ttl_steps() < 1)
    ThrowInvalid(field, ".dynamic.ttl_steps must be >= 1 for TTL eviction, got ", d.ttl_steps());
  if (d.min_count() < 1)
    ThrowInvalid(field, ".dynamic.min_count must be >= 1, got ", d.min_count());
  const int64_t w = d.sketch_width();
  if (d.min_count() > 1 && (w < 64 || w > (int64_t{1} << 30) || (w & (w - 1)) != 0))
    ThrowInvalid(field, ".dynamic.sketch_width must be a power of two in [64, 2^30], got ", w);
  if (!(d.admit_probability() > 0 && d.admit_probability() <= 1))
    ThrowInvalid(field, ".dynamic.admit_probability must be in (0, 1], got ",
                 d.admit_probability());
}

// rounding narrows BF16 / FP16 rows only (of any table kind; ValidateSsdTables refuses
// quantized SSD tables).
void ValidateTablePrecision(const std::string& field, const config::TableConfig& table) {
  const char* precision = config::TableConfig::Precision_Name(table.precision()).c_str();
  if (table.has_rounding() && !IsHalf(table.precision()))
    ThrowInvalid(field, ".rounding is set but ", field, ".precision is ", precision,
                 ": rounding applies to BF16 and FP16 tables only");
}

// An SSD table's cache must hold a row; its optimizer decides a row's bytes, so this runs
// after the model's own checks.
void ValidateSsdTables(const config::DlrmConfig& config) {
  const config::ModelConfig& model = config.model();
  for (int t = 0; t < model.tables_size(); ++t) {
    const config::TableConfig& table = model.tables(t);
    if (!table.has_ssd()) continue;
    const std::string field = Field("model.tables", t);
    if (table.kind() == config::TableConfig::DYNAMIC)
      ThrowInvalid(field, ".ssd is set but ", field,
                   ".kind is DYNAMIC, which the SSD tier does not take yet (FIXED only)");
    if (IsQuantized(table.precision()))
      ThrowInvalid(field, ".ssd is set but ", field, ".precision is ",
                   config::TableConfig::Precision_Name(table.precision()),
                   ": the SSD tier holds FP32, BF16 and FP16 rows");
    if (table.ssd().segment_bytes() < 1 || table.ssd().segment_bytes() > int64_t{1} << 31)
      ThrowInvalid(field, ".ssd.segment_bytes must be in [1, 2^31], got ",
                   table.ssd().segment_bytes());
    const int64_t row_bytes = RowBytes(config, table);
    if (table.ssd().cache_bytes() < row_bytes)
      ThrowInvalid(field, ".ssd.cache_bytes must hold at least one row (", row_bytes,
                   " bytes of weights and optimizer state), got ", table.ssd().cache_bytes());
  }
}

void ValidateMlp(const std::string& field, const config::ModelConfig& model, bool is_top) {
  const config::MlpConfig& mlp = is_top ? model.top_mlp() : model.bottom_mlp();
  if (!(is_top ? model.has_top_mlp() : model.has_bottom_mlp()) || mlp.layer_sizes_size() == 0)
    ThrowInvalid(field, ".layer_sizes must list at least one layer");
  for (int i = 0; i < mlp.layer_sizes_size(); ++i) {
    const int size = mlp.layer_sizes(i);
    if (size <= 0 || size > (1 << 20))
      ThrowInvalid(field, ".layer_sizes[", i, "] must be in [1, 1048576], got ", size);
  }
  if (is_top && mlp.layer_sizes(mlp.layer_sizes_size() - 1) != 1)
    ThrowInvalid(field, ".layer_sizes must end in 1 (the logit), got ",
                 mlp.layer_sizes(mlp.layer_sizes_size() - 1));
}

// The cross network's width is the concatenation's: the bottom output plus every feature's dim.
void ValidateDcn(const config::ModelConfig& model) {
  if (model.dot_self_interaction() && model.interaction() != config::ModelConfig::DOT)
    ThrowInvalid("model.dot_self_interaction is set but model.interaction is not DOT");
  if (model.interaction() != config::ModelConfig::DCN) {
    if (model.has_dcn()) ThrowInvalid("model.dcn is set but model.interaction is not DCN");
    return;
  }
  const config::DcnConfig& dcn = model.dcn();
  if (dcn.num_layers() < 1 || dcn.num_layers() > 64)
    ThrowInvalid("model.dcn.num_layers must be in [1, 64], got ", dcn.num_layers());
  int64_t width = model.bottom_mlp().layer_sizes(model.bottom_mlp().layer_sizes_size() - 1);
  for (const auto& feature : model.sparse_features())
    width += model.tables(FindTable(model, feature.table())).dim();
  if (dcn.rank() < 0 || dcn.rank() > width)
    ThrowInvalid("model.dcn.rank must be 0 (full rank) or in [1, ", width,
                 "] (the concatenation's width), got ", dcn.rank());
  if (width > (1 << 20))
    ThrowInvalid("model.interaction DCN: the concatenation's width ", width, " is above 2^20");
}

void ValidateModel(const config::ModelConfig& model) {
  if (model.num_dense_features() <= 0)
    ThrowInvalid("model.num_dense_features must be > 0, got ", model.num_dense_features());
  if (model.tables_size() == 0) ThrowInvalid("model.tables must list at least one table");
  std::set<std::string> table_names;
  for (int t = 0; t < model.tables_size(); ++t) {
    const auto& table = model.tables(t);
    const std::string field = Field("model.tables", t);
    if (table.name().empty()) ThrowInvalid(field, ".name must not be empty");
    if (!table_names.insert(table.name()).second)
      ThrowInvalid(field, ".name \"", table.name(), "\" is used by another table");
    if (table.num_rows() <= 0) ThrowInvalid(field, ".num_rows must be > 0, got ", table.num_rows());
    if (table.dim() <= 0 || table.dim() > 65536)
      ThrowInvalid(field, ".dim must be in [1, 65536], got ", table.dim());
    if (table.num_rows() > std::numeric_limits<int64_t>::max() / table.dim() / 16)
      ThrowInvalid(field, ": num_rows * dim = ", table.num_rows(), " * ", table.dim(),
                   " overflows");
    ValidateInitializer(field + ".initializer", table.initializer());
    ValidateDynamicTable(field, table);
    ValidateTablePrecision(field, table);
  }
  if (model.sparse_features_size() == 0)
    ThrowInvalid("model.sparse_features must list at least one feature");
  std::set<std::string> feature_names;
  for (int f = 0; f < model.sparse_features_size(); ++f) {
    const auto& feature = model.sparse_features(f);
    const std::string field = Field("model.sparse_features", f);
    if (feature.name().empty()) ThrowInvalid(field, ".name must not be empty");
    if (!feature_names.insert(feature.name()).second)
      ThrowInvalid(field, ".name \"", feature.name(), "\" is used by another feature");
    if (FindTable(model, feature.table()) < 0)
      ThrowInvalid(field, ".table \"", feature.table(), "\" names no table in model.tables");
    if (!(feature.pooling_factor() > 0) || !std::isfinite(feature.pooling_factor()))
      ThrowInvalid(field, ".pooling_factor must be finite and > 0, got ", feature.pooling_factor());
  }
  ValidateMlp("model.bottom_mlp", model, false);
  ValidateMlp("model.top_mlp", model, true);
  ValidateDcn(model);
  if (model.interaction() == config::ModelConfig::DOT) {
    const int bottom_out =
        model.bottom_mlp().layer_sizes(model.bottom_mlp().layer_sizes_size() - 1);
    for (int f = 0; f < model.sparse_features_size(); ++f) {
      const auto& table = model.tables(FindTable(model, model.sparse_features(f).table()));
      if (table.dim() != bottom_out)
        ThrowInvalid(
            "model.interaction DOT needs every embedding dim to equal the bottom MLP's "
            "output width ",
            bottom_out, ", but model.sparse_features[", f, "] (\"", model.sparse_features(f).name(),
            "\") uses table \"", table.name(), "\" of dim ", table.dim());
    }
  }
}

void ValidateSchedule(const config::LrScheduleConfig& s) {
  if (s.warmup_steps() < 0)
    ThrowInvalid("lr_schedule.warmup_steps must be >= 0, got ", s.warmup_steps());
  if (s.decay_start_step() < 0)
    ThrowInvalid("lr_schedule.decay_start_step must be >= 0, got ", s.decay_start_step());
  if (s.decay_steps() < 0)
    ThrowInvalid("lr_schedule.decay_steps must be >= 0, got ", s.decay_steps());
  if (!(s.decay_power() > 0) || !std::isfinite(s.decay_power()))
    ThrowInvalid("lr_schedule.decay_power must be > 0, got ", s.decay_power());
  if (!(s.end_factor() >= 0 && s.end_factor() <= 1))
    ThrowInvalid("lr_schedule.end_factor must be in [0, 1], got ", s.end_factor());
}

void CheckPositive(const std::string& field, double value) {
  if (!(value > 0) || !std::isfinite(value))
    ThrowInvalid(field, " must be finite and > 0, got ", value);
}

void ValidateSharding(const config::ShardingConfig& s, const config::ModelConfig& model) {
  std::set<std::string> tables;
  for (int i = 0; i < s.tables_size(); ++i) {
    const std::string field = Field("sharding.tables", i);
    if (FindTable(model, s.tables(i).table()) < 0)
      ThrowInvalid(field, ".table \"", s.tables(i).table(), "\" names no table in model.tables");
    if (!tables.insert(s.tables(i).table()).second)
      ThrowInvalid(field, ".table \"", s.tables(i).table(), "\" is listed twice");
  }
  if (s.batch_size() <= 0) ThrowInvalid("sharding.batch_size must be > 0, got ", s.batch_size());
  if (s.data_parallel_max_bytes() < 0)
    ThrowInvalid("sharding.data_parallel_max_bytes must be >= 0, got ",
                 s.data_parallel_max_bytes());
  if (s.server_memory_bytes() < 0)
    ThrowInvalid("sharding.server_memory_bytes must be >= 0 (0 = unlimited), got ",
                 s.server_memory_bytes());
  if (s.servers_per_group() <= 0)
    ThrowInvalid("sharding.servers_per_group must be > 0, got ", s.servers_per_group());
  if (!(s.split_fraction() > 0 && s.split_fraction() <= 1))
    ThrowInvalid("sharding.split_fraction must be in (0, 1], got ", s.split_fraction());
  CheckPositive("sharding.memory_bandwidth", s.memory_bandwidth());
  CheckPositive("sharding.network_bandwidth", s.network_bandwidth());
  if (!(s.lookup_seconds() >= 0) || !std::isfinite(s.lookup_seconds()))
    ThrowInvalid("sharding.lookup_seconds must be finite and >= 0, got ", s.lookup_seconds());
  if (s.min_column_block() <= 0)
    ThrowInvalid("sharding.min_column_block must be > 0, got ", s.min_column_block());
}

void ValidateDevice(const config::DeviceConfig& d) {
  if (!config::DeviceConfig::Kind_IsValid(d.kind()))
    ThrowInvalid("device.kind ", static_cast<int>(d.kind()), " is not CPU or CUDA");
  if (d.ordinal() < 0 || d.ordinal() > kMaxDeviceOrdinal)
    ThrowInvalid("device.ordinal must be in [0, ", kMaxDeviceOrdinal, "], got ", d.ordinal());
  if (d.kind() == config::DeviceConfig::CPU && d.ordinal() != 0)
    ThrowInvalid("device.ordinal is ", d.ordinal(),
                 " but device.kind is CPU (ordinals are for CUDA)");
  if (d.kind() == config::DeviceConfig::CPU && d.has_cuda_graph())
    ThrowInvalid("device.cuda_graph is set but device.kind is CPU (graphs are for CUDA)");
  if (!config::DeviceConfig::MatmulPrecision_IsValid(d.matmul_precision()))
    ThrowInvalid("device.matmul_precision ", static_cast<int>(d.matmul_precision()),
                 " is not HIGHEST, HIGH or MEDIUM");
  if (d.kind() == config::DeviceConfig::CPU && d.matmul_precision() == config::DeviceConfig::HIGH)
    ThrowInvalid(
        "device.matmul_precision HIGH (TF32) is for CUDA; the CPU multiplies fp32 (HIGHEST) "
        "or, where it has AVX512-BF16, bf16 (MEDIUM)");
}

void ValidateDistributed(const config::DistributedConfig& d) {
  if (d.staleness() < 1 || d.staleness() > 1000)
    ThrowInvalid("distributed.staleness must be in [1, 1000], got ", d.staleness());
  if (d.lookahead() < 0 || d.lookahead() > 64)
    ThrowInvalid("distributed.lookahead must be in [0, 64], got ", d.lookahead());
}

}  // namespace

int64_t StalenessBound(const config::DistributedConfig& d) {
  return d.mode() == config::DistributedConfig::HYBRID ? d.staleness() : 0;
}

int32_t Lookahead(const config::DistributedConfig& d) {
  if (d.has_lookahead()) return d.lookahead();
  return static_cast<int32_t>(std::clamp<int64_t>(StalenessBound(d), 1, 64));
}

bool IsQuantized(config::TableConfig::Precision precision) {
  return precision == config::TableConfig::INT8 || precision == config::TableConfig::INT4;
}

bool IsHalf(config::TableConfig::Precision precision) {
  return precision == config::TableConfig::BF16 || precision == config::TableConfig::FP16;
}

int64_t ValueBytes(config::TableConfig::Precision precision) {
  DLRM_INTERNAL_CHECK(!IsQuantized(precision));
  return IsHalf(precision) ? 2 : 4;
}

config::TableConfig::Precision WireValuePrecision(const config::DistributedConfig& d) {
  switch (d.wire_precision()) {
    case config::DistributedConfig::BF16: return config::TableConfig::BF16;
    case config::DistributedConfig::FP16: return config::TableConfig::FP16;
    default: return config::TableConfig::FP32;
  }
}

void RequireTrainableRows(const config::ModelConfig& model, const char* who) {
  for (int t = 0; t < model.tables_size(); ++t) {
    const config::TableConfig& table = model.tables(t);
    if (IsQuantized(table.precision()))
      ThrowInvalid(Field("model.tables", t), " (\"", table.name(), "\") has precision ",
                   config::TableConfig::Precision_Name(table.precision()),
                   " (a quantized serving table), which ", who,
                   " does not take yet; use it in one process on the CPU");
  }
}

void RequireFixedTables(const config::ModelConfig& model, const char* who) {
  RequireTrainableRows(model, who);
  for (int t = 0; t < model.tables_size(); ++t) {
    const config::TableConfig& table = model.tables(t);
    const char* what = table.kind() == config::TableConfig::DYNAMIC ? "is DYNAMIC"
                       : table.has_ssd()                            ? "has ssd storage"
                                                                    : nullptr;
    if (what != nullptr)
      ThrowInvalid(Field("model.tables", t), " (\"", table.name(), "\") ", what, ", which ", who,
                   " does not take yet; train it in one process on the CPU");
  }
}

int64_t SparseStateBytesPerRow(const config::SparseOptimizerConfig& optimizer, int32_t dim) {
  switch (optimizer.kind_case()) {
    case config::SparseOptimizerConfig::kAdagrad: return int64_t{dim} * 4;
    case config::SparseOptimizerConfig::kRowwiseAdagrad: return 4;
    case config::SparseOptimizerConfig::kAdam: return int64_t{2} * dim * 4;
    default: return 0;  // SGD, set or not
  }
}

int64_t RowBytes(const config::SparseOptimizerConfig& optimizer,
                 config::TableConfig::Precision precision, int32_t cols) {
  return int64_t{cols} * ValueBytes(precision) + SparseStateBytesPerRow(optimizer, cols);
}

int64_t RowBytes(const config::DlrmConfig& config, const config::TableConfig& table) {
  return RowBytes(config.sparse_optimizer(), table.precision(), table.dim());
}

namespace {

// The set field of an optimizer config's `kind` oneof, by its name.
template <typename OptimizerConfig>
std::string KindName(const OptimizerConfig& optimizer) {
  if (optimizer.kind_case() == OptimizerConfig::KIND_NOT_SET) return "sgd";
  return optimizer.GetDescriptor()->FindFieldByNumber(optimizer.kind_case())->name();
}

}  // namespace

std::string OptimizerName(const config::DenseOptimizerConfig& optimizer) {
  return KindName(optimizer);
}

std::string OptimizerName(const config::SparseOptimizerConfig& optimizer) {
  return KindName(optimizer);
}

int FindTable(const config::ModelConfig& model, const std::string& name) {
  for (int t = 0; t < model.tables_size(); ++t)
    if (model.tables(t).name() == name) return t;
  return -1;
}

config::DlrmConfig ParseConfigText(const std::string& text) {
  config::DlrmConfig config;
  const std::string errors = ParseTextProto(text, &config);
  if (!errors.empty()) ThrowInvalid("config text is not valid: ", errors);
  return config;
}

config::DlrmConfig LoadConfigFile(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    Throw(StatusCode::kIo, "cannot read config file \"", path, "\": it is a directory");
  std::ifstream in(path, std::ios::binary);
  if (!in) Throw(StatusCode::kIo, "cannot read config file \"", path, "\"");
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) Throw(StatusCode::kIo, "error reading config file \"", path, "\"");
  try {
    return ParseConfigText(text.str());
  } catch (const Error& e) {
    Throw(e.code(), path, ": ", e.what());
  }
}

void ValidateConfig(const config::DlrmConfig& config) {
  if (!config.has_model()) ThrowInvalid("model must be set");
  ValidateModel(config.model());
  ValidateSsdTables(config);
  CheckLearningRate("dense_optimizer.learning_rate", config.dense_optimizer().learning_rate());
  CheckLearningRate("sparse_optimizer.learning_rate", config.sparse_optimizer().learning_rate());
  ValidateSchedule(config.lr_schedule());
  if (config.memory_limit_bytes() < 0)
    ThrowInvalid("memory_limit_bytes must be >= 0 (0 = the machine's memory), got ",
                 config.memory_limit_bytes());
  if (config.num_threads() < 0 || config.num_threads() > 1024)
    ThrowInvalid("num_threads must be in [0, 1024] (0 = one per core), got ", config.num_threads());
  if (config.reduction_chunk_rows() <= 0)
    ThrowInvalid("reduction_chunk_rows must be > 0, got ", config.reduction_chunk_rows());
  ValidateSharding(config.sharding(), config.model());
  ValidateDistributed(config.distributed());
  ValidateDevice(config.device());
}

void RequireNonNegative(const std::string& field, float value) {
  if (!std::isfinite(value) || !(value >= 0.0f))
    ThrowInvalid(field, " must be finite and >= 0, got ", value);
}

void RequirePositive(const std::string& field, float value) {
  if (!std::isfinite(value) || !(value > 0.0f))
    ThrowInvalid(field, " must be finite and > 0, got ", value);
}

void RequireUnitInterval(const std::string& field, float value) {
  if (!(value >= 0.0f && value < 1.0f)) ThrowInvalid(field, " must be in [0, 1), got ", value);
}

bool IsValidLearningRate(double lr) {
  return std::isfinite(lr) && lr >= 0 && std::isfinite(static_cast<float>(lr));
}

void SetDeviceByName(const std::string& name, const std::string& what,
                     config::DeviceConfig* device) {
  if (name == "cpu") {
    device->Clear();
    device->set_kind(config::DeviceConfig::CPU);
    return;
  }
  const std::string prefix = "cuda";
  int ordinal = 0;
  if (name.rfind(prefix, 0) != 0)
    ThrowInvalid(what, " must be cpu, cuda or cuda:N, got '", name, "'");
  if (name.size() > prefix.size()) {
    const std::string digits = name.substr(prefix.size() + 1);
    if (name[prefix.size()] != ':' || digits.empty() || digits.size() > 4 ||
        digits.find_first_not_of("0123456789") != std::string::npos)
      ThrowInvalid(what, " must be cpu, cuda or cuda:N, got '", name, "'");
    ordinal = std::stoi(digits);
  }
  device->set_kind(config::DeviceConfig::CUDA);
  device->set_ordinal(ordinal);
}

config::DlrmConfig WithoutPerProcessFields(const config::DlrmConfig& config) {
  config::DlrmConfig job = config;
  job.clear_num_threads();
  job.clear_device();
  job.clear_memory_limit_bytes();
  job.clear_ssd_dir();
  for (config::TableConfig& table : *job.mutable_model()->mutable_tables())
    if (table.has_ssd()) {
      table.mutable_ssd()->clear_cache_bytes();
      table.mutable_ssd()->clear_segment_bytes();
    }
  return job;
}

std::string ConfigToText(const config::DlrmConfig& config) {
  std::string text;
  google::protobuf::TextFormat::PrintToString(config, &text);
  return text;
}

int64_t MemoryLimitBytes(const config::DlrmConfig& config, std::string* source) {
  *source = "memory_limit_bytes";
  const int64_t limit = config.memory_limit_bytes();
  return limit != 0 ? limit : MachineMemoryBytes(source);
}

void CheckFitsMemory(const config::DlrmConfig& config, const std::string& who, int64_t bytes,
                     const std::string& parts, int64_t reserved, const std::string& advice) {
  std::string source;
  const int64_t limit = MemoryLimitBytes(config, &source);
  if (limit == 0 || bytes <= limit - std::min(reserved, limit)) return;
  Throw(StatusCode::kResourceExhausted, who, " needs ", bytes, " bytes", parts, ", but ", source,
        " is ", limit, " bytes", advice);
}

}  // namespace dlrm

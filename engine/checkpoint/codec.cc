#include "engine/checkpoint/codec.h"

#include <google/protobuf/util/message_differencer.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <filesystem>

#include "engine/config/config.h"
#include "engine/core/status.h"
#include "engine/embedding/half_bits.h"
#include "engine/embedding/half_row.h"
#include "engine/embedding/quantized_bits.h"

namespace dlrm::checkpoint {

std::string EmbeddingWeightName(const std::string& key) { return "embedding." + key + ".weight"; }

std::string SparseStateName(const std::string& key, const std::string& state) {
  return "sparse_optimizer/" + key + "/" + state;
}

std::string DenseStateName(const std::string& state) { return "dense_optimizer/" + state; }

const std::string& RequiredMetadata(const CheckpointReader& reader, const std::string& path,
                                    const std::string& key) {
  const auto it = reader.metadata().find(key);
  if (it == reader.metadata().end())
    Throw(StatusCode::kDataLoss, "checkpoint ", path, " lacks metadata \"", key, "\"");
  return it->second;
}

void CheckFormat(const CheckpointReader& reader, const std::string& path, const char* want) {
  const auto it = reader.metadata().find("format");
  if (it == reader.metadata().end())
    Throw(StatusCode::kDataLoss, "checkpoint ", path, " has no format tag: not a libdlrm ",
          "file, expected format \"", want, "\"");
  if (it->second != want)
    Throw(StatusCode::kFailedPrecondition, "checkpoint ", path, " has format \"", it->second,
          "\", expected \"", want, "\"");
}

void WriteStep(int64_t step, CheckpointWriter* writer) {
  if (step < 0) ThrowInvalid("checkpoint step must be >= 0, got ", step);
  writer->SetMetadata("step", std::to_string(step));
}

int64_t ReadStep(const CheckpointReader& reader, const std::string& path) {
  const std::string& text = RequiredMetadata(reader, path, "step");
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno == ERANGE || v < 0)
    Throw(StatusCode::kDataLoss, "checkpoint ", path, ": metadata \"step\" is not a step count: \"",
          text, "\"");
  return static_cast<int64_t>(v);
}

void WriteLayout(const Layout& layout, CheckpointWriter* writer) {
  for (const auto& [key, value] : layout) writer->SetMetadata(key, value);
}

void CheckLayout(const CheckpointReader& reader, const std::string& path, const Layout& want,
                 const char* target) {
  for (const auto& [key, value] : want) {
    const std::string& found = RequiredMetadata(reader, path, key);
    if (found != value)
      Throw(StatusCode::kFailedPrecondition, "checkpoint ", path, " does not fit this ", target,
            ": ", key, " is ", found, " in the checkpoint, ", value, " here");
  }
}

void CheckNoOtherTensors(const CheckpointReader& reader, const std::string& path,
                         const std::set<std::string>& expected, const char* target) {
  for (const std::string& name : reader.TensorNames()) {
    if (expected.count(name) == 0)
      Throw(StatusCode::kFailedPrecondition, "checkpoint ", path, " holds tensor '", name,
            "', which this ", target, " does not have");
  }
}

std::string Join(const std::vector<std::string>& parts) {
  std::string out;
  for (const std::string& p : parts) out += (out.empty() ? "" : ", ") + p;
  return "[" + out + "]";
}

void AddVector(const std::string& name, const std::vector<float>& values,
               CheckpointWriter* writer) {
  writer->AddTensor(name, kF32, {static_cast<int64_t>(values.size())}, values.data(),
                    values.size() * sizeof(float));
}

void AddDenseParams(const DlrmModel<float>& model, CheckpointWriter* writer) {
  for (const DenseParamInfo& info : model.dense_param_infos())
    writer->AddTensor(info.name, kF32, info.shape, model.dense_params().data() + info.offset,
                      info.size * sizeof(float));
}

namespace {

// kFailedPrecondition naming the first of values[0, n) (parameter `name`) beyond fp16's
// finite range: narrowed, it would saturate (as a quantized table's row is refused too).
void RequireFp16Range(const float* values, size_t n, const std::string& name) {
  for (size_t i = 0; i < n; ++i)
    if (std::abs(values[i]) > half_bits::kFp16MaxValue)
      Throw(StatusCode::kFailedPrecondition, "dense parameter ", name, "[", i, "] = ", values[i],
            " is beyond fp16's range (+-", half_bits::kFp16MaxValue,
            "): export the dense parameters as bf16 or fp32");
}

}  // namespace

void AddServingDenseParams(const DlrmModel<float>& model, TablePrecision precision,
                           std::deque<std::vector<uint16_t>>* owned, CheckpointWriter* writer) {
  if (!IsHalf(precision)) return AddDenseParams(model, writer);
  if (precision == config::TableConfig::FP16)
    for (const DenseParamInfo& info : model.dense_param_infos())
      RequireFp16Range(model.dense_params().data() + info.offset, info.size, info.name);
  const TensorEntry::DType dtype =
      precision == config::TableConfig::BF16 ? TensorEntry::BFLOAT16 : TensorEntry::FLOAT16;
  for (const DenseParamInfo& info : model.dense_param_infos()) {
    std::vector<uint16_t>& narrow = owned->emplace_back(info.size);
    NarrowValues(model.dense_params().data() + info.offset, static_cast<int64_t>(info.size),
                 precision, narrow.data());
    writer->AddTensor(info.name, dtype, info.shape, narrow.data(),
                      narrow.size() * sizeof(uint16_t));
  }
}

void ReadServingDenseParams(const CheckpointReader& reader, const DlrmModel<float>& model,
                            float* params) {
  std::vector<uint16_t> narrow;
  for (const DenseParamInfo& info : model.dense_param_infos()) {
    const TensorEntry::DType dtype = reader.Tensor(info.name).dtype();
    if (dtype != TensorEntry::BFLOAT16 && dtype != TensorEntry::FLOAT16) {
      reader.ReadTensor(info.name, kF32, info.shape, params + info.offset);
      continue;
    }
    narrow.resize(info.size);
    reader.ReadTensor(info.name, dtype, info.shape, narrow.data());
    WidenValues(
        narrow.data(), static_cast<int64_t>(info.size),
        dtype == TensorEntry::BFLOAT16 ? config::TableConfig::BF16 : config::TableConfig::FP16,
        params + info.offset);
  }
}

void AddDenseTensors(const DlrmModel<float>& model, DenseOptimizer<float>& optimizer,
                     CheckpointWriter* writer) {
  AddDenseParams(model, writer);
  for (const auto& [name, buffer] : optimizer.StateBuffers())
    AddVector(DenseStateName(name), *buffer, writer);
}

void ReadDenseTensors(const CheckpointReader& reader, const DlrmModel<float>& model, float* params,
                      const StateBufferList& state, std::set<std::string>* expected) {
  for (const DenseParamInfo& info : model.dense_param_infos()) {
    if (expected) expected->insert(info.name);
    reader.ReadTensor(info.name, kF32, info.shape, params + info.offset);
  }
  for (const auto& [state_name, buffer] : state) {
    const std::string name = DenseStateName(state_name);
    if (expected) expected->insert(name);
    reader.ReadTensor(name, kF32, {static_cast<int64_t>(buffer->size())}, buffer->data());
  }
}

namespace {

// A table's sparse optimizer state, each buffer already sized.
void ReadSparseState(const CheckpointReader& reader, const std::string& key,
                     const StateBufferList& state, std::set<std::string>* expected) {
  for (const auto& [state_name, buffer] : state) {
    const std::string name = SparseStateName(key, state_name);
    if (expected) expected->insert(name);
    reader.ReadTensor(name, kF32, {static_cast<int64_t>(buffer->size())}, buffer->data());
  }
}

}  // namespace

TensorEntry::DType RowsDType(const EmbeddingTable<float>& table) {
  DLRM_INTERNAL_CHECK(!table.quantized());
  if (!table.half()) return kF32;
  return table.precision() == config::TableConfig::BF16 ? TensorEntry::BFLOAT16
                                                        : TensorEntry::FLOAT16;
}

void AddEmbedding(const std::string& key, const EmbeddingTable<float>& table,
                  const StateBufferList& state, CheckpointWriter* writer) {
  if (table.half())
    writer->AddTensor(EmbeddingWeightName(key), RowsDType(table), {table.num_rows(), table.dim()},
                      table.halves().data(), table.halves().size() * sizeof(uint16_t));
  else
    writer->AddTensor(EmbeddingWeightName(key), kF32, {table.num_rows(), table.dim()},
                      table.data().data(), table.data().size() * sizeof(float));
  for (const auto& [name, buffer] : state) AddVector(SparseStateName(key, name), *buffer, writer);
}

void ReadEmbedding(const CheckpointReader& reader, const std::string& key,
                   const EmbeddingTable<float>& table, float* weights, const StateBufferList& state,
                   std::set<std::string>* expected) {
  const std::string weight_name = EmbeddingWeightName(key);
  if (expected) expected->insert(weight_name);
  reader.ReadTensor(weight_name, kF32, {table.num_rows(), table.dim()}, weights);
  ReadSparseState(reader, key, state, expected);
}

void ReadEmbedding(const CheckpointReader& reader, const std::string& key,
                   EmbeddingTable<float>* table, const StateBufferList& state,
                   std::set<std::string>* expected) {
  if (!table->half())
    return ReadEmbedding(reader, key, *table, table->data().data(), state, expected);
  const std::string weight_name = EmbeddingWeightName(key);
  if (expected) expected->insert(weight_name);
  reader.ReadTensor(weight_name, RowsDType(*table), {table->num_rows(), table->dim()},
                    table->halves().data());
  ReadSparseState(reader, key, state, expected);
}

void AddQuantizedEmbedding(const std::string& key, int64_t num_rows, int32_t dim,
                           config::TableConfig::Precision precision, const uint8_t* codes,
                           CheckpointWriter* writer) {
  const int64_t row_bytes = StoredRowBytes(precision, dim);
  writer->AddTensor(EmbeddingWeightName(key), TensorEntry::UINT8, {num_rows, row_bytes}, codes,
                    static_cast<size_t>(num_rows * row_bytes));
}

namespace {

// A serving file from before quantized rows carried an fp16 scale and bias (it has two
// fp32 after the codes) is refused by name rather than as a shape mismatch.
void RefuseFp32ScaleBias(const CheckpointReader& reader, const std::string& path,
                         const std::string& key, const EmbeddingTable<float>& table) {
  const std::string name = EmbeddingWeightName(key);
  if (!reader.HasTensor(name)) return;  // ReadTensor names what is missing
  const int64_t old_row_bytes =
      table.row_bytes() - quantized_bits::kScaleBiasBytes + 2 * int64_t{sizeof(float)};
  if (reader.TensorShape(name) != std::vector<int64_t>{table.num_rows(), old_row_bytes}) return;
  Throw(StatusCode::kFailedPrecondition, "checkpoint ", path, ": table \"", key, "\" (",
        PrecisionName(table.precision()),
        ") has rows with an fp32 scale and bias, the layout of older exports; this build "
        "reads fp16 ones: export the model again from its training checkpoint");
}

}  // namespace

void ReadQuantizedEmbedding(const CheckpointReader& reader, const std::string& path,
                            const std::string& key, EmbeddingTable<float>* table) {
  RefuseFp32ScaleBias(reader, path, key, *table);
  reader.ReadTensor(EmbeddingWeightName(key), TensorEntry::UINT8,
                    {table->num_rows(), table->row_bytes()}, table->codes().data());
  for (int64_t r = 0; r < table->num_rows(); ++r)
    if (!QuantizedRowIsValid(table->code_row(r), table->dim(), table->precision()))
      Throw(StatusCode::kDataLoss, "checkpoint ", path, ": table \"", key, "\" (",
            PrecisionName(table->precision()), ") row ", r,
            " has a scale or bias that is not finite, or a negative scale");
}

namespace {

constexpr auto kI64 = TensorEntry::INT64;
constexpr int64_t kDynamicScalars = 7;

std::string DynamicName(const std::string& key, const char* part) {
  return "dynamic." + key + "." + part;
}

template <typename T>
void AddDynamicVector(const std::string& key, const char* part, TensorEntry::DType dtype,
                      const std::vector<T>& values, CheckpointWriter* writer) {
  writer->AddTensor(DynamicName(key, part), dtype, {static_cast<int64_t>(values.size())},
                    values.data(), values.size() * sizeof(T));
}

// A vector tensor of any length; kDataLoss naming it when it has another rank.
template <typename T>
std::vector<T> ReadVectorTensor(const CheckpointReader& reader, const std::string& path,
                                const std::string& name, TensorEntry::DType dtype,
                                std::set<std::string>* expected) {
  if (expected) expected->insert(name);
  const std::vector<int64_t> shape = reader.TensorShape(name);
  if (shape.size() != 1)
    Throw(StatusCode::kDataLoss, "checkpoint ", path, ": tensor '", name, "' has ", shape.size(),
          " dimensions, not 1");
  std::vector<T> values(static_cast<size_t>(shape[0]));
  reader.ReadTensor(name, dtype, shape, values.data());
  return values;
}

template <typename T>
std::vector<T> ReadDynamicVector(const CheckpointReader& reader, const std::string& path,
                                 const std::string& key, const char* part, TensorEntry::DType dtype,
                                 std::set<std::string>* expected) {
  return ReadVectorTensor<T>(reader, path, DynamicName(key, part), dtype, expected);
}

std::string SsdStoredName(const std::string& key) { return "ssd." + key + ".stored"; }

}  // namespace

void AddDynamicRows(const std::string& key, const DynamicRowsSnapshot& s,
                    CheckpointWriter* writer) {
  AddDynamicVector(key, "ids", kI64, s.ids, writer);
  AddDynamicVector(key, "rows", kI64, s.rows, writer);
  AddDynamicVector(key, "last_steps", kI64, s.last_steps, writer);
  AddDynamicVector(key, "counts", kI64, s.counts, writer);
  AddDynamicVector(key, "freed_rows", kI64, s.freed_rows, writer);
  AddDynamicVector(key, "sketch", TensorEntry::UINT32, s.sketch, writer);
  static_assert(sizeof(DynamicRowsStats) == 5 * sizeof(int64_t), "the scalars list every stat");
  const int64_t scalars[kDynamicScalars] = {
      s.next_unused_row, s.last_resolved_step, s.stats.lookups, s.stats.hits,
      s.stats.admitted,  s.stats.evicted,      s.stats.rejected};
  writer->AddTensorCopy(DynamicName(key, "scalars"), kI64, {kDynamicScalars}, scalars,
                        sizeof(scalars));
}

DynamicRowsSnapshot ReadDynamicRows(const CheckpointReader& reader, const std::string& path,
                                    const std::string& key, std::set<std::string>* expected) {
  DynamicRowsSnapshot s;
  s.ids = ReadDynamicVector<int64_t>(reader, path, key, "ids", kI64, expected);
  s.rows = ReadDynamicVector<int64_t>(reader, path, key, "rows", kI64, expected);
  s.last_steps = ReadDynamicVector<int64_t>(reader, path, key, "last_steps", kI64, expected);
  s.counts = ReadDynamicVector<int64_t>(reader, path, key, "counts", kI64, expected);
  s.freed_rows = ReadDynamicVector<int64_t>(reader, path, key, "freed_rows", kI64, expected);
  s.sketch =
      ReadDynamicVector<uint32_t>(reader, path, key, "sketch", TensorEntry::UINT32, expected);
  const auto scalars = ReadDynamicVector<int64_t>(reader, path, key, "scalars", kI64, expected);
  if (s.rows.size() != s.ids.size() || scalars.size() != static_cast<size_t>(kDynamicScalars))
    Throw(StatusCode::kDataLoss, "checkpoint ", path, ": dynamic table '", key, "' has ",
          s.ids.size(), " ids but ", s.rows.size(), " rows and ", scalars.size(), " scalars (want ",
          kDynamicScalars, ")");
  s.next_unused_row = scalars[0];
  s.last_resolved_step = scalars[1];
  s.stats = {scalars[2], scalars[3], scalars[4], scalars[5], scalars[6]};
  return s;
}

StagedState::StagedState(const StateBufferList& live) : live_(live) {
  copies_.reserve(live_.size());  // stable addresses for staged_
  for (const auto& [name, buffer] : live_)
    staged_.emplace_back(name, &copies_.emplace_back(buffer->size()));
}

void StagedState::Commit() const {
  for (size_t b = 0; b < live_.size(); ++b)
    std::copy(copies_[b].begin(), copies_[b].end(), live_[b].second->begin());
}

void AddServingIds(const std::string& key, const std::vector<int64_t>& ids,
                   const std::vector<int64_t>& rows, CheckpointWriter* writer) {
  AddDynamicVector(key, "ids", kI64, ids, writer);
  AddDynamicVector(key, "rows", kI64, rows, writer);
}

std::pair<std::vector<int64_t>, std::vector<int64_t>> ReadServingIds(const CheckpointReader& reader,
                                                                     const std::string& path,
                                                                     const std::string& key) {
  auto ids = ReadDynamicVector<int64_t>(reader, path, key, "ids", kI64, nullptr);
  auto rows = ReadDynamicVector<int64_t>(reader, path, key, "rows", kI64, nullptr);
  if (ids.size() != rows.size())
    Throw(StatusCode::kDataLoss, "checkpoint ", path, ": dynamic table '", key, "' has ",
          ids.size(), " ids but ", rows.size(), " rows");
  return {std::move(ids), std::move(rows)};
}

void AddSsdStored(const std::string& key, const std::vector<uint64_t>& words,
                  CheckpointWriter* writer) {
  writer->AddTensor(SsdStoredName(key), kI64, {static_cast<int64_t>(words.size())}, words.data(),
                    words.size() * sizeof(uint64_t));
}

std::vector<uint64_t> ReadSsdStored(const CheckpointReader& reader, const std::string& path,
                                    const std::string& key, std::set<std::string>* expected) {
  return ReadVectorTensor<uint64_t>(reader, path, SsdStoredName(key), kI64, expected);
}

std::string SsdSaveLockPath(const std::string& path) { return path + ".lock"; }

std::string SsdRowsDirPrefix(const std::string& path) {
  return std::filesystem::path(path).filename().string() + ".rows-";
}

ConfigFit CompareConfigs(const config::DlrmConfig& saved, const config::DlrmConfig& config,
                         std::string* model_diff) {
  google::protobuf::util::MessageDifferencer differ;
  differ.ReportDifferencesToString(model_diff);
  // Memory and placement (an SSD table's cache budget) are not state: a checkpoint loads
  // under any.
  if (!differ.Compare(WithoutPerProcessFields(saved).model(),
                      WithoutPerProcessFields(config).model()))
    return ConfigFit::kOtherModel;
  if (saved.dense_optimizer().kind_case() != config.dense_optimizer().kind_case() ||
      saved.sparse_optimizer().kind_case() != config.sparse_optimizer().kind_case())
    return ConfigFit::kOtherOptimizerKinds;
  return ConfigFit::kFits;
}

}  // namespace dlrm::checkpoint

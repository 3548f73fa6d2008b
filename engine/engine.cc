#include "engine/engine.h"

#include <atomic>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <mutex>
#include <optional>
#include <random>
#include <thread>

#include "engine/checkpoint/checkpoint_file.h"
#include "engine/checkpoint/codec.h"
#include "engine/checkpoint/sharded_checkpoint.h"
#include "engine/config/config.h"
#include "engine/core/cpu_features.h"
#include "engine/core/file_lock.h"
#include "engine/core/finite.h"
#include "engine/core/log.h"
#include "engine/core/metrics.h"
#include "engine/core/status.h"
#include "engine/dense/loss.h"
#include "engine/device_backends.h"
#include "engine/embedding/quantized_bits.h"
#include "engine/embedding/quantized_row.h"
#include "engine/embedding/sparse_optimizer.h"
#include "engine/model/dlrm_model.h"
#include "engine/optim/dense_optimizer.h"
#include "engine/ps/shard_store_file.h"
#include "engine/train/async_step_queue.h"
#include "engine/train/backend.h"
#include "engine/train/memory_budget.h"
#include "engine/train/step.h"

namespace dlrm {
namespace {

bool HasSsdTables(const config::ModelConfig& model) {
  for (const config::TableConfig& table : model.tables())
    if (table.has_ssd()) return true;
  return false;
}

// Removes a directory and everything in it; best effort (what is left is only disk).
void RemoveTree(const std::string& dir) {
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}

// Removes the SSD rows directories of the checkpoint at `path` but `keep`.
void RemoveOtherSsdRows(const std::string& path, const std::string& keep) {
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  const std::string prefix = checkpoint::SsdRowsDirPrefix(path);
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(parent.empty() ? "." : parent, ec)) {
    const std::string name = entry.path().filename().string();
    if (entry.is_directory() && name.rfind(prefix, 0) == 0 &&
        name != std::filesystem::path(keep).filename().string())
      RemoveTree(entry.path().string());
  }
}

// Floats travel through checkpoint metadata in hex so they round-trip exactly.
std::string ExactFloat(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%a", v);
  return buf;
}

// A learning rate from checkpoint metadata, held to the config's rule (IsValidLearningRate):
// kDataLoss naming the key otherwise.
float ReadLearningRate(const CheckpointReader& reader, const std::string& path,
                       const std::string& key) {
  const std::string& text = checkpoint::RequiredMetadata(reader, path, key);
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || *end != '\0')
    Throw(StatusCode::kDataLoss, "checkpoint ", path, ": metadata \"", key,
          "\" is not a number: ", text);
  if (!IsValidLearningRate(v))
    Throw(StatusCode::kDataLoss, "checkpoint ", path, ": metadata \"", key, "\" is ", text,
          ", not a learning rate (finite and >= 0)");
  return static_cast<float>(v);
}

// What the id resolution calls before it reads rows of the host copy: the backend's
// PullRows (a device's rows may be newer).
RowRefresh Refresh(const train::Backend* backend) {
  return [backend](const ChangedRows& rows) { backend->PullRows(rows); };
}

// Gives the backend the rows a prediction's resolve moved (SSD caches). *unsent stays set
// while that has not succeeded, and the next resolve's caller sends them first: a device
// copy that missed them would hold the old rows' values under the new rows.
void SendMovedRows(train::Backend& backend, const DynamicTables& tables, bool* unsent) {
  *unsent = true;
  backend.RowsChanged(tables.ChangedByLastResolve());
  *unsent = false;
}

// SendMovedRows after a resolve that failed part way (the tables before the one that
// failed may have moved rows): a failure here is logged, so that the resolve's own error
// is the one thrown; the rows stay unsent, and go before the next resolve or pull
// (Engine::PullCurrentState).
void SendMovedRowsAfterFailure(train::Backend& backend, const DynamicTables& tables, bool* unsent) {
  if (tables.ChangedByLastResolve().empty()) return;
  try {
    SendMovedRows(backend, tables, unsent);
  } catch (const std::exception& e) {
    DLRM_LOG(kError) << backend.name()
                     << ": sending the rows a failed prediction moved: " << e.what();
  }
}

// After a failed step, the device's copy of the rows the step admitted as they were; a
// failure here is logged, so that the step's own error is the one thrown.
void RestoreDeviceRows(train::Backend& backend) {
  try {
    backend.RestoreChangedRows();
  } catch (const std::exception& e) {
    DLRM_LOG(kError) << backend.name()
                     << ": restoring the rows a failed step admitted: " << e.what();
  }
}

// The index of the model's first quantized table, or -1.
int32_t FirstQuantizedTable(const config::ModelConfig& model) {
  for (int t = 0; t < model.tables_size(); ++t)
    if (IsQuantized(model.tables(t).precision())) return t;
  return -1;
}

}  // namespace

struct Engine::State : train::ModelState {
  State(const config::DlrmConfig& config, ThreadPool* pool, const train::BackendFactory& make)
      : train::ModelState(config, pool),
        backend(make(config, this, pool)),
        dense_lr(config.dense_optimizer().learning_rate()),
        sparse_lr(config.sparse_optimizer().learning_rate()) {}

  // The rows a prediction moved that have not reached the backend (SendMovedRows), sent
  // before anything resolves ids or pulls the backend's copy again.
  void SendUnsentRows() {
    if (rows_unsent) SendMovedRows(*backend, dynamic_tables, &rows_unsent);
  }

  std::unique_ptr<train::Backend> backend;
  bool rows_unsent = false;  // SendMovedRows; under ssd_mu_ or the writer lock
  int64_t step = 0;
  float dense_lr;
  float sparse_lr;
};

Engine::Engine(const config::DlrmConfig& config, train::BackendFactory backend)
    : config_(config),
      backend_factory_(backend ? std::move(backend) : train::BackendFactory(MakeDeviceBackend)) {
  CheckMaxIsa();
  ValidateConfig(config_);
  quantized_table_ = FirstQuantizedTable(config_.model());
  train::CheckModelFitsMemory(config_);  // before a table is allocated
  pool_ = std::make_unique<ThreadPool>(ResolveThreadCount(config_.num_threads()));
  state_ = NewState();
  num_dense_ = state_->model.num_dense_features();
  feature_specs_ = state_->model.feature_specs();
}

ValidatedBatch Engine::ValidateTrainingBatch(const BatchView& batch) const {
  ScopedTimer timer(&validate_ns_);
  return ValidateBatch(batch, num_dense_, feature_specs_, true, pool_.get());
}

Engine::~Engine() {
  async_.reset();  // runs what is still queued while the state is alive
}

void Engine::RequireTrainableTables(const char* what) const {
  if (quantized_table_ < 0) return;
  const config::TableConfig& table = config_.model().tables(quantized_table_);
  Throw(StatusCode::kFailedPrecondition, "model.tables[", quantized_table_, "] (\"", table.name(),
        "\") has precision ", PrecisionName(table.precision()),
        " (a quantized serving table, read-only): ", what,
        " needs trainable (FP32, BF16, FP16) tables; use the checkpoint the model was exported "
        "from");
}

std::unique_lock<std::mutex> Engine::SsdLock() const {
  std::unique_lock<std::mutex> lock(ssd_mu_, std::defer_lock);
  if (state_->dynamic_tables.has_ssd()) lock.lock();
  return lock;
}

void Engine::PullCurrentState(State& s) {
  s.SendUnsentRows();
  s.backend->PullState();
}

std::unique_ptr<Engine::State> Engine::NewState() const {
  return std::make_unique<State>(config_, pool_.get(), backend_factory_);
}

float Engine::TrainStep(const BatchView& batch) {
  RequireTrainableTables("training");
  DrainAsyncSteps();
  const ValidatedBatch valid = ValidateTrainingBatch(batch);
  std::unique_lock<WriterPreferringMutex> lock(mu_);
  return TrainLocked(valid, {});
}

int64_t Engine::SubmitTrainStep(const BatchView& batch) {
  RequireTrainableTables("training");
  // Without the engine's lock: the batch is checked and copied while a queued step runs.
  ValidatedBatch valid = ValidateTrainingBatch(batch);
  AsyncStepQueue* queue = AsyncQueue();
  // The caller's memory is borrowed for this call only: copied into a finished step's
  // storage where there is one; the offsets stay valid for the copy.
  std::unique_ptr<OwnedValidBatch> copy = queue->TakeSpare();
  if (!copy) copy = std::make_unique<OwnedValidBatch>();
  {
    ScopedTimer timer(&copy_ns_);
    copy->Refill(batch, std::move(valid.offsets), pool_.get());
  }
  return queue->Submit(std::move(copy));
}

AsyncStepQueue* Engine::AsyncQueue() {
  std::lock_guard<std::mutex> lock(async_mu_);
  if (!async_)
    async_ = std::make_unique<AsyncStepQueue>(
        [this](const QueuedStep& now, const QueuedStep& next) {
          return TrainValidStep(*now.batch, {now.ticket, next.batch, next.ticket});
        },
        kAsyncQueueDepth);
  return async_.get();
}

float Engine::WaitTrainStep(int64_t ticket) {
  AsyncStepQueue* queue;
  {
    std::lock_guard<std::mutex> lock(async_mu_);
    queue = async_.get();
  }
  if (queue == nullptr)
    ThrowInvalid("ticket ", ticket, " was never issued (nothing was submitted)");
  return queue->Wait(ticket);
}

void Engine::DrainAsyncSteps() const {
  AsyncStepQueue* queue;
  {
    std::lock_guard<std::mutex> lock(async_mu_);
    queue = async_.get();
  }
  if (queue) queue->Drain();
}

float Engine::TrainValidStep(const ValidatedBatch& batch, const train::StepLookahead& lookahead) {
  std::unique_lock<WriterPreferringMutex> lock(mu_);
  return TrainLocked(batch, lookahead);
}

float Engine::TrainLocked(const ValidatedBatch& batch, const train::StepLookahead& lookahead) {
  State& s = *state_;
  const train::StepRates rates =
      train::RatesForStep(config_.lr_schedule(), s.dense_lr, s.sparse_lr, s.step);
  const ValidatedBatch* rows = &batch;
  train::StepLookahead ahead = lookahead;
  if (!s.dynamic_tables.empty()) {
    // The step's ids resolve to rows now (admissions initialize rows in the host state,
    // which a CPU backend computes on); the next batch's ids are not rows yet.
    s.SendUnsentRows();
    ScopedTimer timer(&resolve_ns_);
    rows =
        &s.dynamic_tables.ResolveForStep(batch, s.step, &s.model.tables(), s.sparse_optimizer.get(),
                                         pool_.get(), Refresh(s.backend.get()));
    ahead = {lookahead.token, nullptr, 0};
  }
  double loss = 0;
  try {
    if (!s.dynamic_tables.empty()) s.backend->RowsChanged(s.dynamic_tables.ChangedByLastResolve());
    // SSD tables read the next batch's rows from disk while this step computes.
    if (lookahead.next != nullptr && s.dynamic_tables.has_ssd())
      s.dynamic_tables.ReadAheadForNext(*lookahead.next);
    loss = s.backend->TrainStep(*rows, rates, ahead);
  } catch (...) {
    // A step that fails (diverged) changes nothing: nor the ids' rows, on any device.
    if (!s.dynamic_tables.empty()) {
      s.dynamic_tables.DropReadAhead();
      s.dynamic_tables.RollBackStep(&s.model.tables(), s.sparse_optimizer.get());
      RestoreDeviceRows(*s.backend);
    }
    throw;
  }
  s.step = rates.t;
  return static_cast<float>(loss);
}

void Engine::PredictValid(const ValidatedBatch& batch, float* logits) const {
  State& s = *state_;  // with SSD tables the caches change, one prediction at a time
  if (s.dynamic_tables.empty()) return s.backend->PredictLogits(batch, logits);
  RowBatch rows;
  if (!s.dynamic_tables.has_ssd()) {
    s.dynamic_tables.LookupRows(batch, &rows);
    return s.backend->PredictLogits(rows.batch(), logits);
  }
  std::lock_guard<std::mutex> lock(ssd_mu_);
  s.SendUnsentRows();
  try {
    s.dynamic_tables.ResolveForPredict(batch, s.step, &s.model.tables(), s.sparse_optimizer.get(),
                                       &rows, Refresh(s.backend.get()));
  } catch (...) {
    SendMovedRowsAfterFailure(*s.backend, s.dynamic_tables, &s.rows_unsent);
    throw;
  }
  SendMovedRows(*s.backend, s.dynamic_tables, &s.rows_unsent);
  s.backend->PredictLogits(rows.batch(), logits);
}

void Engine::Predict(const BatchView& batch, float* out, int64_t capacity) const {
  const ValidatedBatch vb =
      ValidateBatch(batch, num_dense_, feature_specs_, false, pool_.get());  // no lock needed
  std::shared_lock<WriterPreferringMutex> lock(mu_);
  if (out == nullptr) ThrowInvalid("output buffer is NULL");
  if (capacity < batch.batch_size)
    ThrowInvalid("output buffer holds ", capacity, " values but batch_size is ", batch.batch_size);
  std::vector<float> logits(batch.batch_size);
  PredictValid(vb, logits.data());
  for (int64_t i = 0; i < batch.batch_size; ++i) out[i] = StableSigmoid(logits[i]);
}

EvalResult Engine::Evaluate(const std::vector<BatchView>& batches) const {
  std::shared_lock<WriterPreferringMutex> lock(mu_);
  if (batches.empty()) ThrowInvalid("evaluate needs at least one batch");
  std::vector<ValidatedBatch> validated;
  for (size_t i = 0; i < batches.size(); ++i) {
    try {
      validated.push_back(ValidateBatch(batches[i], num_dense_, feature_specs_, true, pool_.get()));
    } catch (const Error& e) {
      Throw(e.code(), "batches[", i, "]: ", e.what());
    }
  }
  std::vector<double> probabilities;
  std::vector<float> labels;
  std::vector<float> logits;
  for (const ValidatedBatch& vb : validated) {
    logits.resize(vb.view.batch_size);
    PredictValid(vb, logits.data());
    for (int64_t i = 0; i < vb.view.batch_size; ++i) {
      probabilities.push_back(StableSigmoid(static_cast<double>(logits[i])));
      labels.push_back(vb.view.labels[i]);
    }
  }
  return Evaluation(probabilities, labels);
}

void Engine::SetLearningRate(LrTarget target, float lr) {
  if (!IsValidLearningRate(lr)) ThrowInvalid("learning rate must be finite and >= 0, got ", lr);
  if (target != LrTarget::kDense && target != LrTarget::kSparse && target != LrTarget::kAll)
    ThrowInvalid("learning rate target must be DENSE (1), SPARSE (2) or ALL (3), got ",
                 static_cast<int>(target));
  DrainAsyncSteps();
  std::unique_lock<WriterPreferringMutex> lock(mu_);
  if (target != LrTarget::kSparse) state_->dense_lr = lr;
  if (target != LrTarget::kDense) state_->sparse_lr = lr;
}

float Engine::learning_rate(LrTarget target) const {
  std::shared_lock<WriterPreferringMutex> lock(mu_);
  return target == LrTarget::kSparse ? state_->sparse_lr : state_->dense_lr;
}

StepPhases Engine::step_phases() const {
  std::shared_lock<WriterPreferringMutex> lock(mu_);
  StepPhases out = state_->backend->Phases();
  const auto seconds = [](const std::atomic<int64_t>& ns) { return 1e-9 * ns.load(); };
  out.phases.insert(out.phases.begin(), {{"validate", seconds(validate_ns_)},
                                         {"copy", seconds(copy_ns_)},
                                         {"resolve", seconds(resolve_ns_)}});
  return out;
}

std::string Engine::device() const {
  std::shared_lock<WriterPreferringMutex> lock(mu_);
  return state_->backend->name();
}

int64_t Engine::step() const {
  std::shared_lock<WriterPreferringMutex> lock(mu_);
  return state_->step;
}

TableStats Engine::GetTableStats(const std::string& table) const {
  std::shared_lock<WriterPreferringMutex> lock(mu_);
  const std::unique_lock<std::mutex> ssd_lock = SsdLock();  // predictions move SSD caches
  State& s = *state_;  // StateBuffers() is not const; only sizes are read
  const int t = FindTable(config_.model(), table);
  if (t < 0) Throw(StatusCode::kNotFound, "no table named \"", table, "\"");
  const auto& weights = s.model.tables()[static_cast<size_t>(t)];
  TableStats stats;
  stats.capacity = stats.size = weights.num_rows();
  int64_t bytes = weights.memory_bytes();
  for (const auto& [name, buffer] : s.sparse_optimizer->StateBuffers(t))
    bytes += static_cast<int64_t>(buffer->size() * sizeof(float));
  const config::TableConfig& tc = config_.model().tables(t);
  if (tc.kind() == config::TableConfig::DYNAMIC || tc.has_ssd()) {
    const DynamicRows& rows = s.dynamic_tables.rows(t);
    stats.dynamic = !tc.has_ssd();
    stats.capacity = tc.has_ssd() ? tc.num_rows() : rows.options().capacity;
    stats.size = tc.has_ssd() ? tc.num_rows() : rows.size();
    stats.counts = rows.stats();
    bytes += static_cast<int64_t>(rows.memory_bytes());
  }
  stats.memory_bytes = bytes;
  return stats;
}

int64_t ParameterInfo::size() const {
  int64_t n = 1;
  for (const int64_t d : shape) n *= d;
  return n;
}

std::vector<ParameterInfo> Engine::Parameters() const {
  std::shared_lock<WriterPreferringMutex> lock(mu_);
  std::vector<ParameterInfo> params;
  for (const DenseParamInfo& info : state_->model.dense_param_infos())
    params.push_back({info.name, info.shape});
  for (const auto& table : config_.model().tables())  // an SSD table's rows, not its cache's
    params.push_back(
        {checkpoint::EmbeddingWeightName(table.name()), {table.num_rows(), table.dim()}});
  return params;
}

namespace {

// The storage of a named parameter inside a state, or {nullptr, 0}. Not for a table
// TableNamed finds stored apart (StoredApart).
template <typename StateT>
std::pair<float*, int64_t> FindParameter(StateT& s, const std::string& name) {
  for (const DenseParamInfo& info : s.model.dense_param_infos())
    if (info.name == name)
      return {s.model.dense_params().data() + info.offset, static_cast<int64_t>(info.size)};
  for (auto& table : s.model.tables())
    if (checkpoint::EmbeddingWeightName(table.name()) == name)
      return {table.data().data(), static_cast<int64_t>(table.data().size())};
  Throw(StatusCode::kNotFound, "no parameter named \"", name, "\"");
}

// The index of the table whose weights are parameter `name`, or -1.
int TableNamed(const config::ModelConfig& model, const std::string& name) {
  for (int t = 0; t < model.tables_size(); ++t)
    if (checkpoint::EmbeddingWeightName(model.tables(t).name()) == name) return t;
  return -1;
}

// Whether a table's parameter is not the floats the model holds: an SSD table's rows are
// on disk (the model holds a cache), a quantized table's are codes, a BF16 / FP16 one's
// 16-bit values.
bool StoredApart(const config::TableConfig& table) {
  return table.has_ssd() || table.precision() != config::TableConfig::FP32;
}

}  // namespace

void Engine::ReadParameter(const std::string& name, float* out, int64_t capacity) const {
  std::shared_lock<WriterPreferringMutex> lock(mu_);
  const int t = TableNamed(config_.model(), name);
  const config::TableConfig* apart =
      t >= 0 && StoredApart(config_.model().tables(t)) ? &config_.model().tables(t) : nullptr;
  const auto [data, size] =
      apart ? std::pair<float*, int64_t>(nullptr, apart->num_rows() * apart->dim())
            : FindParameter(*state_, name);
  if (out == nullptr) ThrowInvalid("output buffer is NULL");
  if (capacity < size)
    ThrowInvalid("output buffer holds ", capacity, " values but parameter \"", name, "\" has ",
                 size);
  // A prediction moving an SSD table's cache waits: the pull and the read see it still.
  const std::unique_lock<std::mutex> ssd_lock = SsdLock();
  PullCurrentState(*state_);  // a device's rows: an SSD table's cache, 16-bit ones
  if (apart && apart->has_ssd()) return ReadSsdTable(t, out);
  if (apart) return ReadNarrowTable(state_->model.tables()[static_cast<size_t>(t)], out);
  std::copy(data, data + size, out);
}

void Engine::ReadNarrowTable(const EmbeddingTable<float>& table, float* out) const {
  ParallelFor(pool_.get(), table.num_rows(),
              [&](int64_t r) { table.ReadRow(r, out + r * table.dim()); });
}

void Engine::ReadSsdTable(int32_t t, float* out) const {
  const config::TableConfig& table = config_.model().tables(t);
  constexpr int64_t kRows = 4096;  // rows per read of the store
  for (int64_t first = 0; first < table.num_rows(); first += kRows)
    state_->dynamic_tables.ReadSsdRows(t, state_->model.tables(), first,
                                       std::min(kRows, table.num_rows() - first),
                                       out + first * table.dim());
}

void Engine::WriteParameter(const std::string& name, const float* values, int64_t count) {
  std::unique_lock<WriterPreferringMutex> lock(mu_);
  const int t = TableNamed(config_.model(), name);
  if (t >= 0 && config_.model().tables(t).has_ssd())
    Throw(StatusCode::kFailedPrecondition, "parameter \"", name,
          "\" is an SSD table's: its rows are written by training steps and checkpoints only");
  const config::TableConfig* table = t >= 0 ? &config_.model().tables(t) : nullptr;
  if (table && IsQuantized(table->precision()))
    Throw(StatusCode::kFailedPrecondition, "parameter \"", name, "\" is a table of precision ",
          PrecisionName(table->precision()),
          " (a quantized serving table): its rows are read-only");
  const bool half = table && IsHalf(table->precision());
  const auto [data, size] =
      half ? std::pair<float*, int64_t>(nullptr, table->num_rows() * table->dim())
           : FindParameter(*state_, name);
  if (values == nullptr) ThrowInvalid("values is NULL");
  if (count != size)
    ThrowInvalid("parameter \"", name, "\" has ", size, " values but ", count, " were given");
  for (int64_t i = 0; i < count; ++i)
    if (!std::isfinite(values[i]))
      ThrowInvalid("values[", i, "] for parameter \"", name, "\" is not finite (", values[i], ")");
  PullCurrentState(*state_);  // the other parameters and the optimizer state stay
  if (half)
    WriteHalfTable(values, &state_->model.tables()[static_cast<size_t>(t)]);
  else
    std::copy(values, values + count, data);
  state_->backend->PushState();
}

void Engine::WriteHalfTable(const float* values, EmbeddingTable<float>* table) const {
  // Narrowed to nearest: a write is a cast, not an update that stochastic rounding serves.
  ParallelFor(pool_.get(), table->num_rows(),
              [&](int64_t r) { table->WriteRow(r, values + r * table->dim()); });
}

void Engine::Save(const std::string& path) const {
  RequireTrainableTables("Save (a training checkpoint)");
  // With SSD tables, saves of one path in any process run one at a time (each removes the
  // rows directories beside the file but its own) and loads wait for them. Taken before
  // this engine's locks: waiting for another's save holds up none of its calls.
  std::optional<FileLock> one_save;
  if (HasSsdTables(config_.model()))
    one_save.emplace(checkpoint::SsdSaveLockPath(path), FileLock::kExclusive);
  DrainAsyncSteps();  // save the state after every submitted step
  std::shared_lock<WriterPreferringMutex> lock(mu_);
  // StateBuffers() hands out mutable pointers; under the reader lock we only read them.
  State& s = *state_;
  const std::unique_lock<std::mutex> ssd_lock = SsdLock();  // no prediction moves a cache
  PullCurrentState(s);
  CheckpointWriter writer;
  writer.SetMetadata("format", checkpoint::kEngineFormat);
  writer.SetMetadata("config", ConfigToText(config_));
  checkpoint::WriteStep(s.step, &writer);
  writer.SetMetadata("dense_lr", ExactFloat(s.dense_lr));
  writer.SetMetadata("sparse_lr", ExactFloat(s.sparse_lr));
  checkpoint::AddDenseTensors(s.model, *s.dense_optimizer, &writer);
  for (size_t t = 0; t < s.model.tables().size(); ++t) {
    const auto& table = s.model.tables()[t];
    if (config_.model().tables(static_cast<int>(t)).has_ssd()) continue;  // SaveSsdRows
    checkpoint::AddEmbedding(table.name(), table,
                             s.sparse_optimizer->StateBuffers(static_cast<int32_t>(t)), &writer);
  }
  std::vector<DynamicRowsSnapshot> snapshots;  // borrowed by the writer
  const std::vector<int32_t> dynamic = s.dynamic_tables.table_indices();
  snapshots.reserve(dynamic.size());
  for (const int32_t t : dynamic) {
    snapshots.push_back(s.dynamic_tables.rows(t).Snapshot());
    checkpoint::AddDynamicRows(s.model.tables()[static_cast<size_t>(t)].name(), snapshots.back(),
                               &writer);
  }
  if (!s.dynamic_tables.has_ssd()) return writer.WriteAtomic(path);
  WriteWithSsdRows(path, &writer);
}

void Engine::WriteWithSsdRows(const std::string& path, CheckpointWriter* writer) const {
  const std::string rows_dir = SaveSsdRows(path, writer);
  bool renamed = false;
  try {
    writer->WriteAtomic(path, &renamed);
  } catch (...) {
    // Before the rename, the file it was for was not written. After it (the directory's
    // sync failed) the file names it, and a crash may yet bring back the old one: keep both.
    if (!renamed) RemoveTree(rows_dir);
    throw;
  }
  RemoveOtherSsdRows(path, rows_dir);  // the ones of the file just replaced
}

std::string Engine::SaveSsdRows(const std::string& path, CheckpointWriter* writer) const {
  State& s = *state_;
  std::random_device random;
  char suffix[32];
  std::snprintf(suffix, sizeof suffix, "%08x%08x", random(), random());
  const std::filesystem::path file(path);
  const std::string name = checkpoint::SsdRowsDirPrefix(path) + suffix;
  const std::string dir = (file.parent_path() / name).string();
  s.dynamic_tables.FlushAndCopyStore(dir, &s.model.tables(), s.sparse_optimizer.get());
  writer->SetMetadata(checkpoint::kSsdRowsKey, name);
  for (const int32_t t : s.dynamic_tables.ssd_table_indices())
    checkpoint::AddSsdStored(s.model.tables()[static_cast<size_t>(t)].name(),
                             s.dynamic_tables.ssd(t).stored_words(), writer);
  return dir;
}

void Engine::Load(const std::string& path) {
  DrainAsyncSteps();
  const CheckpointReader reader(path);
  LoadFrom(reader, path);
}

namespace {

// The config an engine checkpoint was saved with: kFailedPrecondition for a file of another
// libdlrm format, kDataLoss when the config is missing or does not parse (the file is
// damaged: the same code from Load and FromCheckpoint).
config::DlrmConfig ReadSavedConfig(const CheckpointReader& reader, const std::string& path,
                                   const char* format = checkpoint::kEngineFormat) {
  checkpoint::CheckFormat(reader, path, format);
  const std::string& text = checkpoint::RequiredMetadata(reader, path, "config");
  try {
    return ParseConfigText(text);
  } catch (const Error& e) {
    Throw(StatusCode::kDataLoss, "checkpoint \"", path, "\" holds no valid config: ", e.what());
  }
}

bool IsServingModel(const CheckpointReader& reader) {
  const auto it = reader.metadata().find("format");
  return it != reader.metadata().end() && it->second == checkpoint::kServingFormat;
}

// The config of a serving model: every table in memory (an SSD table's rows are exported
// whole), nothing on disk; FP32, BF16 and FP16 tables of precision `quantize` when that is
// INT8 or INT4.
// A model with quantized tables cannot train, so its sparse optimizer is SGD (no state
// is allocated for its rows).
config::DlrmConfig ServingConfig(const config::DlrmConfig& config,
                                 config::TableConfig::Precision quantize) {
  config::DlrmConfig serving = config;
  bool quantized = false;
  for (config::TableConfig& table : *serving.mutable_model()->mutable_tables()) {
    table.clear_ssd();
    if (!IsQuantized(table.precision()) && IsQuantized(quantize)) {
      table.set_precision(quantize);
      table.clear_rounding();  // a BF16 / FP16 table's
    }
    quantized = quantized || IsQuantized(table.precision());
  }
  serving.clear_ssd_dir();
  if (quantized) serving.mutable_sparse_optimizer()->mutable_sgd();
  return serving;
}

// kInvalidArgument unless quantize is FP32 (as the tables are), INT8 or INT4 and dense is
// FP32, BF16 or FP16; kFailedPrecondition when a table is already quantized to another
// precision.
void CheckExportPrecision(const config::ModelConfig& model, config::TableConfig::Precision quantize,
                          config::TableConfig::Precision dense) {
  if (!config::TableConfig::Precision_IsValid(quantize) || IsHalf(quantize))
    ThrowInvalid("export: quantize must be FP32, INT8 or INT4, got ", static_cast<int>(quantize));
  if (dense != config::TableConfig::FP32 && !IsHalf(dense))
    ThrowInvalid("export: dense (the dense parameters' precision) must be FP32, BF16 or FP16, ",
                 "got ", static_cast<int>(dense), " (", PrecisionName(dense), ")");
  for (int t = 0; t < model.tables_size(); ++t) {
    const config::TableConfig::Precision p = model.tables(t).precision();
    if (IsQuantized(p) && quantize != config::TableConfig::FP32 && quantize != p)
      Throw(StatusCode::kFailedPrecondition, "export: model.tables[", t, "] (\"",
            model.tables(t).name(), "\") is already ", PrecisionName(p),
            "; it cannot be exported as ", PrecisionName(quantize));
  }
}

}  // namespace

namespace {

// The config a sharded checkpoint's manifest holds (kDataLoss when it does not parse).
config::DlrmConfig ManifestConfig(const checkpoint::CheckpointManifest& manifest,
                                  const std::string& dir) {
  try {
    return ParseConfigText(manifest.config());
  } catch (const Error& e) {
    Throw(StatusCode::kDataLoss, "sharded checkpoint \"", dir,
          "\" holds no valid config: ", e.what());
  }
}

}  // namespace

std::unique_ptr<Engine> Engine::FromCheckpoint(const std::string& path, const std::string& device) {
  if (std::filesystem::is_directory(path)) {
    const checkpoint::CheckpointManifest manifest = checkpoint::ReadManifest(path);
    config::DlrmConfig config = ManifestConfig(manifest, path);
    if (!device.empty()) SetDeviceByName(device, "device", config.mutable_device());
    auto engine = std::make_unique<Engine>(config);
    engine->LoadSharded(path, manifest);
    return engine;
  }
  const CheckpointReader reader(path);
  const bool serving = IsServingModel(reader);
  config::DlrmConfig config = ReadSavedConfig(
      reader, path, serving ? checkpoint::kServingFormat : checkpoint::kEngineFormat);
  if (!device.empty()) SetDeviceByName(device, "device", config.mutable_device());
  auto engine = std::make_unique<Engine>(config);
  if (serving)
    engine->LoadServing(reader, path);
  else
    engine->LoadFrom(reader, path);
  return engine;
}

void Engine::LoadSharded(const std::string& dir, const checkpoint::CheckpointManifest& manifest) {
  RequireTrainableTables("restoring a sharded checkpoint");
  std::unique_ptr<State> staged = NewState();
  State& s = *staged;
  s.step = checkpoint::LoadDenseState(&s.model, s.dense_optimizer.get(),
                                      dir + "/" + checkpoint::kDenseStateFile);
  if (s.step != manifest.step())
    Throw(StatusCode::kDataLoss, "sharded checkpoint \"", dir, "\": its dense state is of step ",
          s.step, " but its MANIFEST of step ", manifest.step());
  ps::LoadWholeTables(dir, manifest, config_, &s.model.tables(), s.sparse_optimizer.get());
  s.backend->PushState();
  std::unique_lock<WriterPreferringMutex> lock(mu_);
  state_ = std::move(staged);
}

void Engine::CheckCheckpointFits(const CheckpointReader& reader, const std::string& path) const {
  const config::DlrmConfig saved = ReadSavedConfig(reader, path);
  std::string differences;
  const checkpoint::ConfigFit fit = checkpoint::CompareConfigs(saved, config_, &differences);
  if (fit == checkpoint::ConfigFit::kOtherModel)
    Throw(StatusCode::kFailedPrecondition,
          "checkpoint was written for a different model (checkpoint vs engine): ", differences);
  if (fit == checkpoint::ConfigFit::kOtherOptimizerKinds)
    Throw(StatusCode::kFailedPrecondition,
          "checkpoint was written with different optimizer kinds than this engine's config");
}

void Engine::LoadFrom(const CheckpointReader& reader, const std::string& path) {
  RequireTrainableTables("restoring a training checkpoint");
  CheckCheckpointFits(reader, path);
  // Stage everything in a fresh state; swap only when all of it was read.
  std::unique_ptr<State> staged = NewState();
  State& s = *staged;
  s.step = checkpoint::ReadStep(reader, path);
  s.dense_lr = ReadLearningRate(reader, path, "dense_lr");
  s.sparse_lr = ReadLearningRate(reader, path, "sparse_lr");
  checkpoint::ReadDenseTensors(reader, s.model, s.model.dense_params().data(),
                               s.dense_optimizer->StateBuffers());
  for (size_t t = 0; t < s.model.tables().size(); ++t) {
    auto& table = s.model.tables()[t];
    if (config_.model().tables(static_cast<int>(t)).has_ssd()) continue;  // LoadSsdRows
    checkpoint::ReadEmbedding(reader, table.name(), &table,
                              s.sparse_optimizer->StateBuffers(static_cast<int32_t>(t)));
  }
  std::vector<DynamicRowsSnapshot> snapshots;
  for (const int32_t t : s.dynamic_tables.table_indices())
    snapshots.push_back(
        checkpoint::ReadDynamicRows(reader, path, s.model.tables()[static_cast<size_t>(t)].name()));
  s.dynamic_tables.Restore(snapshots);
  if (s.dynamic_tables.has_ssd()) LoadSsdRows(reader, path, &s);
  s.backend->PushState();
  std::unique_lock<WriterPreferringMutex> lock(mu_);
  state_ = std::move(staged);
}

void Engine::LoadSsdRows(const CheckpointReader& reader, const std::string& path,
                         State* staged) const {
  const std::string& name = checkpoint::RequiredMetadata(reader, path, checkpoint::kSsdRowsKey);
  const FileLock no_save(checkpoint::SsdSaveLockPath(path), FileLock::kShared);  // (Save)
  // One ordinary name beside the file (what SaveSsdRows writes), never a way out of it.
  if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos)
    Throw(StatusCode::kDataLoss, "checkpoint ", path, ": ", checkpoint::kSsdRowsKey, " '", name,
          "' is not the name of a directory beside it");
  const std::filesystem::path dir = std::filesystem::path(path).parent_path() / name;
  if (!std::filesystem::is_directory(dir))
    Throw(StatusCode::kDataLoss, "checkpoint ", path, ": the directory of its SSD tables' rows, ",
          dir.string(), ", is missing");
  std::vector<std::vector<uint64_t>> stored;
  for (const int32_t t : staged->dynamic_tables.ssd_table_indices())
    stored.push_back(checkpoint::ReadSsdStored(
        reader, path, staged->model.tables()[static_cast<size_t>(t)].name()));
  staged->dynamic_tables.RestoreStore(dir.string(), std::move(stored));
}

// What an export's writer borrows until WriteAtomic: SSD tables' rows read whole, the
// codes of tables quantized for the export and 16-bit values (dense parameters, a BF16 /
// FP16 SSD table's rows).
struct Engine::ServingTables {
  std::deque<std::vector<float>> rows;
  std::deque<std::vector<uint8_t>> codes;
  std::deque<std::vector<uint16_t>> halves;
};

void Engine::Export(const std::string& path, config::TableConfig::Precision quantize,
                    config::TableConfig::Precision dense) const {
  CheckExportPrecision(config_.model(), quantize, dense);
  // A serving model never replaces what it cannot stand for: `dlrm export --checkpoint=m
  // --out=m` would have turned a training checkpoint into a serving model, its optimizer
  // state (and, quantized, its weights) lost. Another export is replaced as usual.
  const std::string existing = PeekCheckpointFormat(path);
  if (!existing.empty() && existing != checkpoint::kServingFormat)
    Throw(StatusCode::kFailedPrecondition, "export to \"", path, "\" would replace a file of ",
          "format \"", existing, "\" (a serving model replaces only another): write it to ",
          "another path");
  const config::DlrmConfig serving = ServingConfig(config_, quantize);
  CheckExportFitsMemory(serving);
  DrainAsyncSteps();
  std::shared_lock<WriterPreferringMutex> lock(mu_);
  std::lock_guard<std::mutex> ssd_lock(ssd_mu_);
  State& s = *state_;  // only read (StateBuffers and the SSD tables' reads are not const)
  PullCurrentState(s);
  CheckpointWriter writer;
  writer.SetMetadata("format", checkpoint::kServingFormat);
  writer.SetMetadata("config", ConfigToText(serving));
  checkpoint::WriteStep(s.step, &writer);
  ServingTables owned;
  checkpoint::AddServingDenseParams(s.model, dense, &owned.halves, &writer);
  for (int t = 0; t < serving.model().tables_size(); ++t)
    AddServingTable(t, serving.model().tables(t).precision(), &owned, &writer);
  std::vector<std::vector<int64_t>> ids, rows;
  ids.reserve(s.model.tables().size());
  rows.reserve(s.model.tables().size());
  for (const int32_t t : s.dynamic_tables.table_indices()) {
    ids.emplace_back();
    rows.emplace_back();
    s.dynamic_tables.rows(t).ForEachByRecency([&](int64_t id, int64_t row) {
      ids.back().push_back(id);
      rows.back().push_back(row);
    });
    checkpoint::AddServingIds(s.model.tables()[static_cast<size_t>(t)].name(), ids.back(),
                              rows.back(), &writer);
  }
  writer.WriteAtomic(path);
}

namespace {

// How Export writes a table of config `tc` in `precision`: one decision for
// AddServingTable and for what CheckExportFitsMemory counts.
enum class ServingForm {
  kAsIs,       // its codes or 16-bit rows, written as they are
  kFloats,     // its FP32 rows (an SSD table's read whole)
  kQuantized,  // its rows (widened to floats if 16-bit or on SSD) quantized to codes
  kNarrowed,   // an SSD table's 16-bit rows, read whole as floats and narrowed back
};

ServingForm ServingFormOf(const config::TableConfig& tc, config::TableConfig::Precision precision) {
  const bool half = IsHalf(tc.precision());
  if (IsQuantized(tc.precision()) || (half && !tc.has_ssd() && !IsQuantized(precision)))
    return ServingForm::kAsIs;
  if (IsQuantized(precision)) return ServingForm::kQuantized;
  return half ? ServingForm::kNarrowed : ServingForm::kFloats;
}

// Whether ServingFloats copies a table's rows into floats (an SSD table's are read whole,
// 16-bit rows widened) rather than lending the model's own.
bool ServingRowsCopied(const config::TableConfig& tc) {
  return tc.has_ssd() || IsHalf(tc.precision());
}

// What Export stages in memory for such a table beside the model, in bytes: its rows as
// floats where ServingFloats copies them, then its codes when quantized or its 16-bit rows
// narrowed back.
int64_t ServingStagingBytes(const config::TableConfig& tc,
                            config::TableConfig::Precision precision) {
  const ServingForm form = ServingFormOf(tc, precision);
  if (form == ServingForm::kAsIs) return 0;
  const int64_t values = tc.num_rows() * tc.dim();
  const int64_t floats = ServingRowsCopied(tc) ? values * static_cast<int64_t>(sizeof(float)) : 0;
  if (form == ServingForm::kQuantized)
    return floats + tc.num_rows() * StoredRowBytes(precision, tc.dim());
  return floats +
         (form == ServingForm::kNarrowed ? values * static_cast<int64_t>(sizeof(uint16_t)) : 0);
}

}  // namespace

void Engine::AddServingTable(int32_t t, config::TableConfig::Precision precision,
                             ServingTables* owned, CheckpointWriter* writer) const {
  const EmbeddingTable<float>& table = state_->model.tables()[static_cast<size_t>(t)];
  const config::TableConfig& tc = config_.model().tables(t);
  const std::string weight = checkpoint::EmbeddingWeightName(table.name());
  const std::vector<int64_t> shape = {tc.num_rows(), tc.dim()};
  const int64_t count = tc.num_rows() * tc.dim();
  const ServingForm form = ServingFormOf(tc, precision);
  if (form == ServingForm::kAsIs)
    return table.quantized()
               ? checkpoint::AddQuantizedEmbedding(table.name(), table.num_rows(), table.dim(),
                                                   table.precision(), table.codes().data(), writer)
               : checkpoint::AddEmbedding(table.name(), table, {}, writer);
  const float* values = ServingFloats(t, owned);
  if (form == ServingForm::kQuantized)
    return AddQuantizedServingRows(t, precision, values, owned, writer);
  if (form == ServingForm::kFloats)
    return writer->AddTensor(weight, checkpoint::kF32, shape, values,
                             static_cast<size_t>(count) * sizeof(float));
  std::vector<uint16_t>& halves = owned->halves.emplace_back(static_cast<size_t>(count));
  NarrowValues(values, count, table.precision(), halves.data());
  writer->AddTensor(weight, checkpoint::RowsDType(table), shape, halves.data(),
                    halves.size() * sizeof(uint16_t));
}

void Engine::CheckExportFitsMemory(const config::DlrmConfig& serving) const {
  int64_t staging = 0, largest = 0;
  int largest_table = 0;
  for (int t = 0; t < config_.model().tables_size(); ++t) {
    const int64_t bytes =
        ServingStagingBytes(config_.model().tables(t), serving.model().tables(t).precision());
    staging += bytes;
    if (bytes > largest) largest = bytes, largest_table = t;
  }
  if (staging == 0) return;
  const int64_t model = train::ModelMemoryBytes(config_);
  CheckFitsMemory(config_, "export", staging,
                  StrCat(" of rows staged beside the model's ", model, " (the most for table \"",
                         config_.model().tables(largest_table).name(), "\", ", largest,
                         " bytes: an SSD table is read whole, 16-bit rows are widened to be "
                         "quantized)"),
                  model);
}

const float* Engine::ServingFloats(int32_t t, ServingTables* owned) const {
  const EmbeddingTable<float>& table = state_->model.tables()[static_cast<size_t>(t)];
  const config::TableConfig& tc = config_.model().tables(t);
  if (!ServingRowsCopied(tc)) return table.data().data();
  std::vector<float>& rows =
      owned->rows.emplace_back(static_cast<size_t>(tc.num_rows() * tc.dim()));
  if (tc.has_ssd())
    ReadSsdTable(t, rows.data());
  else
    ReadNarrowTable(table, rows.data());
  return rows.data();
}

void Engine::AddQuantizedServingRows(int32_t t, config::TableConfig::Precision precision,
                                     const float* values, ServingTables* owned,
                                     CheckpointWriter* writer) const {
  const config::TableConfig& tc = config_.model().tables(t);
  const int64_t row_bytes = StoredRowBytes(precision, tc.dim());
  uint8_t* codes = owned->codes.emplace_back(static_cast<size_t>(tc.num_rows() * row_bytes)).data();
  std::atomic<int64_t> beyond{tc.num_rows()};  // the first row out of the codes' range
  ParallelFor(pool_.get(), tc.num_rows(), [&](int64_t r) {
    const float* row = values + r * tc.dim();
    if (QuantizedRangeHolds(row, tc.dim()))
      return QuantizeRow(row, tc.dim(), precision, codes + r * row_bytes);
    for (int64_t seen = beyond.load(); r < seen && !beyond.compare_exchange_weak(seen, r);) {
    }
  });
  if (beyond.load() < tc.num_rows())
    Throw(StatusCode::kFailedPrecondition, "export: table \"", tc.name(), "\" row ", beyond.load(),
          " has a value beyond +-", quantized_bits::kMaxMagnitude, ", which ",
          PrecisionName(precision),
          " rows' fp16 scale and bias cannot hold; export it unquantized");
  checkpoint::AddQuantizedEmbedding(tc.name(), tc.num_rows(), tc.dim(), precision, codes, writer);
}

void Engine::LoadServing(const CheckpointReader& reader, const std::string& path) {
  std::unique_ptr<State> staged = NewState();
  State& s = *staged;
  s.step = checkpoint::ReadStep(reader, path);
  checkpoint::ReadServingDenseParams(reader, s.model, s.model.dense_params().data());
  for (auto& table : s.model.tables()) {
    if (table.quantized())
      checkpoint::ReadQuantizedEmbedding(reader, path, table.name(), &table);
    else
      checkpoint::ReadEmbedding(reader, table.name(), &table, {});
  }
  std::vector<DynamicRowsSnapshot> snapshots;
  for (const int32_t t : s.dynamic_tables.table_indices()) {
    const std::string& name = s.model.tables()[static_cast<size_t>(t)].name();
    auto [ids, rows] = checkpoint::ReadServingIds(reader, path, name);
    try {
      snapshots.push_back(DynamicRows::ResidentSnapshot(s.dynamic_tables.rows(t).options(),
                                                        std::move(ids), std::move(rows)));
    } catch (const Error& e) {
      Throw(e.code(), "checkpoint ", path, ": dynamic table \"", name, "\": ", e.what());
    }
  }
  s.dynamic_tables.Restore(snapshots);
  s.backend->PushState();
  std::unique_lock<WriterPreferringMutex> lock(mu_);
  state_ = std::move(staged);
}

}  // namespace dlrm

// The Engine: one DLRM model with its optimizers, what the C ABI's dlrm_engine wraps.
//
// Thread safety: Predict, Evaluate and Save take a reader lock and may run concurrently;
// TrainStep, SetLearningRate and Load take the writer lock, which a waiting writer gets
// before readers that arrive after it (core/shared_mutex.h). Every input is validated
// before any state changes, so a call that throws leaves the engine exactly as it was.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <vector>

#include "engine/config/dlrm.pb.h"
#include "engine/core/metrics.h"
#include "engine/core/shared_mutex.h"
#include "engine/core/stopwatch.h"
#include "engine/core/thread_pool.h"
#include "engine/data/batch.h"
#include "engine/train/backend.h"

namespace dlrm {

class AsyncStepQueue;
namespace checkpoint {
class CheckpointManifest;
}  // namespace checkpoint
class CheckpointReader;
class CheckpointWriter;
template <typename T>
class EmbeddingTable;

struct ParameterInfo {
  std::string name;  // "bottom_mlp.0.weight", "top_mlp.1.bias", "embedding.<table>.weight"
  std::vector<int64_t> shape;
  int64_t size() const;
};

enum class LrTarget { kDense = 1, kSparse = 2, kAll = 3 };

class Engine {
 public:
  // Validates config (throws kInvalidArgument naming the field) and initializes the model.
  // `backend` makes the step's backend (null: config.device()'s, engine/device_backends.h;
  // tests give one that computes on a copy of its own, as a device does).
  explicit Engine(const config::DlrmConfig& config, train::BackendFactory backend = nullptr);
  // Builds the engine from the config stored in a checkpoint and restores its state, on
  // `device` ("cpu", "cuda", "cuda:N"; SetDeviceByName) instead of the checkpoint's own
  // device when not empty: the state is the same on every device, so a checkpoint
  // trained on a GPU serves on a machine without one.
  // path may also be a sharded checkpoint's directory (a multi-process job's, any number of
  // servers and trainers): the engine then holds the job's model whole, at its step.
  static std::unique_ptr<Engine> FromCheckpoint(const std::string& path,
                                                const std::string& device = "");
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // One optimizer step on the batch; returns the batch's mean loss before the update.
  // Throws kFailedPrecondition, changing nothing, if the loss or a gradient is not finite.
  float TrainStep(const BatchView& batch);

  // Asynchronous training: validates and copies the batch, queues the step (blocking
  // while kAsyncQueueDepth steps wait) and returns its ticket. Steps run in submission
  // order on an engine thread, so results are bitwise those of TrainStep in that order.
  // A bad batch throws here and queues nothing.
  int64_t SubmitTrainStep(const BatchView& batch);
  // Waits for a submitted step; returns its loss or throws its error (kCancelled for
  // steps queued behind a failed one). Each ticket is waited for once.
  float WaitTrainStep(int64_t ticket);
  static constexpr size_t kAsyncQueueDepth = 2;

  // Click probabilities into out[0 .. batch_size); capacity is out's length.
  void Predict(const BatchView& batch, float* out, int64_t capacity) const;

  // Log loss and ROC AUC over all samples of the batches (labels required).
  EvalResult Evaluate(const std::vector<BatchView>& batches) const;

  // Overrides the base learning rate (the schedule still multiplies it).
  void SetLearningRate(LrTarget target, float lr);
  float learning_rate(LrTarget target) const;

  int64_t step() const;

  // What table `table` holds and did (model/dynamic_tables.h); memory_bytes counts its
  // weights, sparse optimizer state and, for a DYNAMIC table, its id index. An SSD table
  // reports its rows as capacity and size, its cache's counts (hits of the cache, rows
  // brought in as admitted, rows written back or dropped as evicted) and the cache's
  // memory. kNotFound for an unknown name. Reader lock.
  TableStats GetTableStats(const std::string& table) const;

  // Every trainable parameter: the MLPs' layers in order, then one table per embedding.
  std::vector<ParameterInfo> Parameters() const;
  // Copies a parameter into out (capacity floats); kNotFound for an unknown name.
  void ReadParameter(const std::string& name, float* out, int64_t capacity) const;
  // Replaces a parameter's values (count must equal its size; every value finite).
  // Optimizer state is kept. Writer lock; on error nothing changes. Not an SSD table's
  // (kFailedPrecondition: its rows are written by training or a checkpoint).
  void WriteParameter(const std::string& name, const float* values, int64_t count);

  // Writes parameters, optimizer state, step and learning rates atomically with a checksum.
  // SSD tables' rows go to a directory beside the file (<file>.rows-<suffix>), written
  // before it and named in it; the one the file replaced is removed after it.
  void Save(const std::string& path) const;
  // Writes a compact read-only model for serving (checkpoint::kServingFormat) atomically:
  // the config, step, dense parameters, every table's weights (an SSD table's read whole,
  // to be held in memory) and each DYNAMIC table's ids and rows; no optimizer state, no
  // admission state. FromCheckpoint loads it (the Go Predictor and the C ABI's
  // create_from_checkpoint too) and predicts bitwise as this engine; training it starts the
  // optimizers afresh. Reader lock.
  // quantize INT8 or INT4 writes the FP32, BF16 and FP16 tables row-wise quantized
  // (quantized_row.h): an engine loading that model predicts from the codes directly (not
  // bitwise as this one) and refuses training, Save and WriteParameter. quantize FP32
  // writes every table in its own precision. A table already quantized is written as it
  // is (kFailedPrecondition when quantize names another quantized precision).
  // dense BF16 or FP16 writes the dense parameters (MLPs, cross network) rounded to
  // nearest in 16 bits, half their bytes; the loading engine widens them (exactly) and
  // predicts with those values. FP32 keeps them as they are. kInvalidArgument for any
  // other quantize or dense, before anything is written. kFailedPrecondition when `path`
  // holds a libdlrm file that is not a serving model (a training checkpoint stays as it is).
  // kResourceExhausted naming the table when what it stages (an SSD table read whole, 16-bit
  // rows widened to be quantized) does not fit beside the model in the memory limit.
  void Export(const std::string& path,
              config::TableConfig::Precision quantize = config::TableConfig::FP32,
              config::TableConfig::Precision dense = config::TableConfig::FP32) const;
  // Restores a checkpoint written by an engine with the same model and optimizer kinds.
  // Everything is read and verified before the state is replaced.
  void Load(const std::string& path);

  const config::DlrmConfig& config() const { return config_; }
  // Where it computes: "cpu", "cuda:0" (train/backend.h).
  std::string device() const;
  // The host time of the training steps so far, by phase: the Engine's (batch validation,
  // the asynchronous queue's copy of a submitted batch, DYNAMIC / SSD tables' id
  // resolution), then the backend's (train/backend.h). Subtract two readings for a window.
  StepPhases step_phases() const;
  int num_threads() const { return pool_->num_threads(); }

 private:
  struct State;
  struct ServingTables;
  std::unique_ptr<State> NewState() const;
  // ssd_mu_, locked where the model has SSD tables (unlocked otherwise). mu_ held first.
  std::unique_lock<std::mutex> SsdLock() const;
  // Makes the host copy of `s` current (Backend::PullState), after giving the backend the
  // rows a prediction moved but could not send (else the pull would copy the device's old
  // slots over them). Under ssd_mu_ or the writer lock.
  static void PullCurrentState(State& s);
  // ValidateBatch of a training batch (labels required) against the model's features,
  // timed as step_phases' `validate`. Needs no lock.
  ValidatedBatch ValidateTrainingBatch(const BatchView& batch) const;
  // Export's part for table t, written in `precision` (what the serving config says);
  // what the writer borrows is kept in owned. mu_ and ssd_mu_ held.
  void AddServingTable(int32_t t, config::TableConfig::Precision precision, ServingTables* owned,
                       CheckpointWriter* writer) const;
  // Table t's rows as floats (num_rows x dim): its own FP32 rows, else read (an SSD table)
  // or widened (16-bit rows) into a vector kept in owned. mu_ and ssd_mu_ held.
  const float* ServingFloats(int32_t t, ServingTables* owned) const;
  // kResourceExhausted naming the table staged most, where what Export stages for
  // `serving` (SSD tables read whole, 16-bit rows widened to quantize) does not fit beside
  // the model in config's memory limit (train/memory_budget.h).
  void CheckExportFitsMemory(const config::DlrmConfig& serving) const;
  // Table t's rows `values` written quantized row-wise to `precision`, the codes kept in
  // owned. mu_ held.
  void AddQuantizedServingRows(int32_t t, config::TableConfig::Precision precision,
                               const float* values, ServingTables* owned,
                               CheckpointWriter* writer) const;
  // A quantized or BF16 / FP16 table's values (num_rows x dim) into out; mu_ held.
  void ReadNarrowTable(const EmbeddingTable<float>& table, float* out) const;
  // A BF16 / FP16 table's rows = values (num_rows x dim) narrowed to nearest; mu_ held.
  void WriteHalfTable(const float* values, EmbeddingTable<float>* table) const;
  // kFailedPrecondition (naming the difference) unless the checkpoint is an engine
  // checkpoint of this model and optimizer kinds.
  void CheckCheckpointFits(const CheckpointReader& reader, const std::string& path) const;
  void LoadFrom(const CheckpointReader& reader, const std::string& path);
  // What Export wrote, into a fresh state swapped in when all of it was read.
  void LoadServing(const CheckpointReader& reader, const std::string& path);
  // A sharded checkpoint's dense state and whole tables, the same way.
  void LoadSharded(const std::string& dir, const checkpoint::CheckpointManifest& manifest);
  // An asynchronous step: its validated copy of a batch, and the step queued behind it,
  // for the backend to copy in meanwhile.
  float TrainValidStep(const ValidatedBatch& batch, const train::StepLookahead& lookahead);
  // One step; mu_ held exclusively.
  float TrainLocked(const ValidatedBatch& batch, const train::StepLookahead& lookahead);
  // logits of a validated batch, its DYNAMIC tables' ids looked up (nothing admitted), its
  // SSD tables' rows brought into their caches; mu_ held (shared or exclusive).
  void PredictValid(const ValidatedBatch& batch, float* logits) const;
  // Save's part for SSD tables (under the path's save lock, Save's): their rows copied
  // into a new directory beside `path` and named in the writer's metadata (SaveSsdRows,
  // which returns the directory), the file written, then the replaced file's rows removed.
  void WriteWithSsdRows(const std::string& path, CheckpointWriter* writer) const;
  std::string SaveSsdRows(const std::string& path, CheckpointWriter* writer) const;
  // Every row of SSD table t into out[num_rows x dim]; mu_ and ssd_mu_ held.
  void ReadSsdTable(int32_t t, float* out) const;
  // LoadFrom's part for SSD tables, into the staged state.
  void LoadSsdRows(const CheckpointReader& reader, const std::string& path, State* staged) const;
  // kFailedPrecondition naming the model's first quantized table (a serving model's,
  // read-only), found once at construction: `what` needs trainable rows.
  void RequireTrainableTables(const char* what) const;
  // Runs every queued asynchronous step (so mutations apply after them, in order).
  void DrainAsyncSteps() const;
  // The asynchronous step queue, created by the first call.
  AsyncStepQueue* AsyncQueue();

  config::DlrmConfig config_;
  train::BackendFactory backend_factory_;
  // step_phases' own, in nanoseconds: validation and copies run on the callers' threads,
  // without the engine's lock.
  mutable std::atomic<int64_t> validate_ns_{0}, copy_ns_{0}, resolve_ns_{0};
  // What a batch is checked against: the config's, fixed for the engine's life (a Load
  // takes the same model), so validation needs no lock.
  int32_t num_dense_ = 0;
  std::vector<SparseFeatureSpec> feature_specs_;
  int32_t quantized_table_ = -1;  // the first quantized (read-only) table, or -1
  std::unique_ptr<ThreadPool> pool_;
  mutable WriterPreferringMutex mu_;
  // With SSD tables, what mu_'s readers do to the caches (prediction brings rows in, a
  // checkpoint flushes them, a parameter read reads them) is one at a time under this.
  mutable std::mutex ssd_mu_;
  std::unique_ptr<State> state_;
  // Created by the first SubmitTrainStep; declared last so it is destroyed (and drained)
  // while everything it uses is still alive.
  mutable std::mutex async_mu_;
  std::unique_ptr<AsyncStepQueue> async_;
};

}  // namespace dlrm

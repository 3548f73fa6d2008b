// The device seams checked without a device: the Engine's backend computing on a state of
// its own (train/backend.h), a trainer's backend that computes on a copy of the dense
// parameters (trainer_backend.h), and owned shards that train a copy of the store
// (owned_shards.h), as a GPU's do.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "engine/config/dlrm.pb.h"
#include "engine/core/thread_pool.h"
#include "engine/data/batch.h"
#include "engine/embedding/embedding_bag.h"
#include "engine/embedding/embedding_table.h"
#include "engine/embedding/packed_row.h"
#include "engine/model/dlrm_model.h"
#include "engine/model/dynamic_tables.h"
#include "engine/ps/shard_store.h"
#include "engine/train/backend.h"
#include "engine/train/owned_shards.h"
#include "engine/train/trainer_backend.h"

namespace dlrm::testing {

// The Engine's backend computing with the CPU's code on a model state of its own, copied
// from the Engine's host copy only when told (PushState, RowsChanged) and back only when
// asked (PullState), as the CUDA backend's device copy (cuda/backend.h): the Engine's side
// of that contract, checked without a GPU. A read the Engine serves from its host copy
// without PullState, or rows it changes without RowsChanged, show as different bits.
class CopyingEngineBackend final : public train::Backend {
 public:
  // host: the Engine's; own_ starts as its copy.
  CopyingEngineBackend(const config::DlrmConfig& config, train::ModelState* host, ThreadPool* pool)
      : host_(*host), own_(config, pool), cpu_(train::MakeCpuBackend(&own_, pool)) {
    PushState();
  }
  static train::BackendFactory Factory() {
    return [](const config::DlrmConfig& c, train::ModelState* s, ThreadPool* p) {
      return std::make_unique<CopyingEngineBackend>(c, s, p);
    };
  }
  std::string name() const override { return "copying"; }
  double TrainStep(const ValidatedBatch& batch, const train::StepRates& rates,
                   const train::StepLookahead& lookahead) override {
    host_stale_ = true;  // as the CUDA backend: from here the copy may change
    return cpu_->TrainStep(batch, rates, lookahead);
  }
  void PredictLogits(const ValidatedBatch& batch, float* logits) const override {
    cpu_->PredictLogits(batch, logits);
  }
  StepPhases Phases() const override { return cpu_->Phases(); }
  void PullState() const override {
    std::lock_guard<std::mutex> lock(mu_);
    if (!host_stale_) return;  // as the CUDA backend: only after a step
    Copy(own_, &host_);
    host_stale_ = false;
  }
  void PushState() override {
    std::lock_guard<std::mutex> lock(mu_);
    Copy(host_, &own_);
    CopyKeys();
    host_stale_ = false;
  }
  void RowsChanged(const std::vector<ChangedRows>& changed) override {
    std::lock_guard<std::mutex> lock(mu_);  // as the CUDA backend's
    saved_.clear();  // the last step's, first (as the CUDA backend's ForgetReplacedRows)
    const std::vector<const int64_t*> host_keys = HostKeys();
    for (const ChangedRows& c : changed) {
      std::vector<int64_t>& keys = keys_[static_cast<size_t>(c.table)];
      Saved s{c.table, *c.rows, Packed(own_, c.table, *c.rows), {}};
      Unpack(Packed(host_, c.table, *c.rows), c.table, *c.rows, &own_);
      if (!keys.empty())  // an SSD table's slots now hold the rows the host's keys name
        for (const int64_t r : *c.rows) {
          s.keys.push_back(keys[static_cast<size_t>(r)]);
          keys[static_cast<size_t>(r)] = host_keys[static_cast<size_t>(c.table)][r];
        }
      saved_.push_back(std::move(s));
    }
  }
  void RestoreChangedRows() override {
    std::lock_guard<std::mutex> lock(mu_);
    for (const Saved& s : saved_) {
      Unpack(s.values, s.table, s.rows, &own_);
      for (size_t i = 0; i < s.keys.size(); ++i)
        keys_[static_cast<size_t>(s.table)][static_cast<size_t>(s.rows[i])] = s.keys[i];
    }
    saved_.clear();
  }
  void PullRows(const ChangedRows& rows) const override {
    std::lock_guard<std::mutex> lock(mu_);  // called from the resolution's threads
    if (!host_stale_) return;
    Unpack(Packed(own_, rows.table, *rows.rows), rows.table, *rows.rows, &host_);
  }

 private:
  struct Saved {
    int32_t table;
    std::vector<int64_t> rows;
    std::vector<float> values;  // packed rows (packed_row.h)
    std::vector<int64_t> keys;  // the rows' rounding keys (a keyed table)
  };
  // The host's SSD slot keys (DynamicTables::CacheRowKeys), which the copy keeps its own
  // copy of, as the CUDA backend does on the device.
  std::vector<const int64_t*> HostKeys() const {
    return host_.dynamic_tables.CacheRowKeys(host_.model.tables().size());
  }
  void CopyKeys() {
    const std::vector<const int64_t*> host_keys = HostKeys();
    keys_.assign(host_keys.size(), {});
    for (size_t t = 0; t < host_keys.size(); ++t) {
      if (host_keys[t] == nullptr) continue;
      keys_[t].assign(host_keys[t], host_keys[t] + own_.model.tables()[t].num_rows());
      own_.model.tables()[t].KeyRoundingBy(keys_[t].data());
    }
  }
  // Everything a device copies in and out: dense parameters, the dense optimizer's state,
  // every table's rows and the sparse optimizer's state (each side keeps its rounding keys).
  static void Copy(train::ModelState& from, train::ModelState* to) {
    to->model.dense_params() = from.model.dense_params();
    auto dense_to = to->dense_optimizer->StateBuffers();
    auto dense_from = from.dense_optimizer->StateBuffers();
    for (size_t i = 0; i < dense_to.size(); ++i) *dense_to[i].second = *dense_from[i].second;
    for (size_t t = 0; t < to->model.tables().size(); ++t) {
      const int64_t* keys = to->model.tables()[t].rounding_rows();
      to->model.tables()[t] = from.model.tables()[t];
      to->model.tables()[t].KeyRoundingBy(keys);
      auto sparse_to = to->sparse_optimizer->StateBuffers(static_cast<int32_t>(t));
      auto sparse_from = from.sparse_optimizer->StateBuffers(static_cast<int32_t>(t));
      for (size_t i = 0; i < sparse_to.size(); ++i) *sparse_to[i].second = *sparse_from[i].second;
    }
  }
  static std::vector<float> Packed(train::ModelState& state, int32_t t,
                                   const std::vector<int64_t>& rows) {
    std::vector<float> out;
    PackRows(state.model.tables()[static_cast<size_t>(t)], state.sparse_optimizer->StateBuffers(t),
             rows, &out);
    return out;
  }
  static void Unpack(const std::vector<float>& packed, int32_t t, const std::vector<int64_t>& rows,
                     train::ModelState* state) {
    UnpackRows(packed.data(), state->sparse_optimizer->StateBuffers(t), rows,
               &state->model.tables()[static_cast<size_t>(t)]);
  }

  train::ModelState& host_;
  mutable train::ModelState own_;  // PullState reads its state buffers (non-const getters)
  std::unique_ptr<train::Backend> cpu_;
  std::vector<Saved> saved_;                // what RowsChanged replaced in own_
  std::vector<std::vector<int64_t>> keys_;  // own_'s SSD slot keys (CopyKeys)
  mutable bool host_stale_ = false;         // own_ trained since the last copy either way
  mutable std::mutex mu_;
};

// A backend that computes on a copy of the dense parameters refreshed only when the trainer
// says they changed, as a device backend does (cuda/trainer_backend.h): the trainer's side of
// that contract, checked without a GPU. It counts the refreshes.
class CopyingBackend final : public train::TrainerBackend {
 public:
  CopyingBackend(const config::DlrmConfig& c, const DlrmModel<float>* host, ThreadPool* pool,
                 int* refreshes)
      : host_(*host),
        own_(c, pool, /*allocate_tables=*/false),
        pool_(pool),
        refreshes_(refreshes) {}
  std::string name() const override { return "copying"; }
  double ForwardBackward(const ValidatedBatch& part, int64_t global_batch,
                         std::vector<EmbeddingTable<float>>& rows, std::vector<float>* dense_grad,
                         std::vector<float>* d_pooled) override {
    Refresh();
    const EmbeddingBagCollection<float> bags(&rows, own_.feature_bindings(), own_.pooled_width());
    return own_.ForwardBackwardPart(part, global_batch, bags, dense_grad, d_pooled, pool_);
  }
  void PredictLogits(const ValidatedBatch& batch, std::vector<EmbeddingTable<float>>& rows,
                     float* logits) override {
    Refresh();
    const EmbeddingBagCollection<float> bags(&rows, own_.feature_bindings(), own_.pooled_width());
    own_.PredictLogits(batch, bags, logits, pool_);
  }
  double ForwardBackwardPooled(const ValidatedBatch& part, int64_t global_batch,
                               const float* pooled, std::vector<float>* dense_grad,
                               std::vector<float>* d_pooled) override {
    Refresh();
    return own_.ForwardBackwardPooled(part, global_batch, pooled, dense_grad, d_pooled, pool_);
  }
  void PredictLogitsPooled(const ValidatedBatch& batch, const float* pooled,
                           float* logits) override {
    Refresh();
    own_.PredictLogitsPooled(batch, pooled, logits, pool_);
  }
  void ParametersChanged() override { stale_ = true; }

 private:
  void Refresh() {
    if (!stale_) return;
    own_.dense_params() = host_.dense_params();
    stale_ = false;
    ++*refreshes_;
  }

  const DlrmModel<float>& host_;
  DlrmModel<float> own_;
  ThreadPool* pool_;
  int* refreshes_;
  bool stale_ = true;
};

// Owned shards whose rows and optimizer state live in a copy of the store, copied back only
// by PullState and refreshed from the store only after StoreChanged, as a device's
// (cuda/owned_shards.h): the trainer's side of that contract, checked without a GPU. A
// call computes with the store's own code on the copy (swapped in for the call). As a
// device, it holds the shards the store pools (BoundTables of its local features), never
// the row-wise pieces the store serves and trains on the host.
class CopyingOwnedShards final : public train::OwnedShards {
 public:
  explicit CopyingOwnedShards(ps::EmbeddingShardStore* store) : store_(*store) { Refresh(); }
  std::string name() const override { return "copying"; }
  void Pool(const ValidatedBatch& batch, float* out) override {
    OnCopy([&] { store_.Pool(batch, out); });
  }
  bool PooledUpdateIsFinite(const ValidatedBatch& batch, const float* d_pooled, float lr,
                            int64_t step) override {
    bool ok = false;
    OnCopy([&] { ok = store_.PooledUpdateIsFinite(batch, d_pooled, lr, step); });
    return ok;
  }
  void ApplyPooledUpdate(const float* d_pooled, float lr, int64_t step) override {
    OnCopy([&] { store_.ApplyPooledUpdate(d_pooled, lr, step); });
  }
  void PullState() override {
    if (stale_) return;  // the store was written since: it is the truth
    for (size_t t = 0; t < tables_.size(); ++t) {
      if (!held_[t]) continue;
      store_.mutable_shard_tables()[t] = tables_[t];
      auto buffers = store_.optimizer().StateBuffers(static_cast<int32_t>(t));
      for (size_t s = 0; s < buffers.size(); ++s) *buffers[s].second = states_[t][s];
    }
  }
  void StoreChanged() override { stale_ = true; }

 private:
  void Refresh() {
    held_ = BoundTables(store_.local_features(), store_.shard_tables().size());
    tables_ = store_.shard_tables();
    states_.assign(tables_.size(), {});
    for (size_t t = 0; t < tables_.size(); ++t)
      for (const auto& [name, buffer] : store_.optimizer().StateBuffers(static_cast<int32_t>(t)))
        states_[t].push_back(*buffer);
    stale_ = false;
  }
  // Exchanges the copy with the store's rows and state (of the held tables).
  void Swap() {
    for (size_t t = 0; t < tables_.size(); ++t) {
      if (!held_[t]) continue;
      std::swap(store_.mutable_shard_tables()[t], tables_[t]);
      auto buffers = store_.optimizer().StateBuffers(static_cast<int32_t>(t));
      for (size_t s = 0; s < buffers.size(); ++s) std::swap(*buffers[s].second, states_[t][s]);
    }
  }
  template <typename Fn>
  void OnCopy(Fn fn) {
    if (stale_) Refresh();
    Swap();
    try {
      fn();
    } catch (...) {
      Swap();
      throw;
    }
    Swap();
  }

  ps::EmbeddingShardStore& store_;
  std::vector<EmbeddingTable<float>> tables_;
  std::vector<std::vector<std::vector<float>>> states_;  // [shard][state buffer]
  std::vector<char> held_;                               // BoundTables: the shards copied
  bool stale_ = false;
};

}  // namespace dlrm::testing

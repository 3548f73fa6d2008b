#include "engine/model/dynamic_tables.h"

#include <algorithm>
#include <utility>

#include "engine/config/config.h"
#include "engine/core/status.h"

namespace dlrm {

DynamicTables::Table::Table(const config::DlrmConfig& config, int32_t table_index)
    : index(table_index),
      name(config.model().tables(table_index).name()),
      default_row(config.model().tables(table_index).dynamic().unadmitted() ==
                          config::DynamicTableConfig::DEFAULT_ROW
                      ? config.model().tables(table_index).num_rows() - 1
                      : -1),
      initializer(config.model().tables(table_index).initializer()),
      seed(config.seed()),
      rows(DynamicRowsOptionsFor(config.model().tables(table_index), config.seed(), table_index)) {}

DynamicTables::DynamicTables(const config::DlrmConfig& config) {
  const config::ModelConfig& model = config.model();
  std::vector<int> slot_of_table(static_cast<size_t>(model.tables_size()), -1);
  int dynamic = 0;
  for (int t = 0; t < model.tables_size(); ++t)
    if (model.tables(t).kind() == config::TableConfig::DYNAMIC) slot_of_table[t] = dynamic++;
  tables_.reserve(static_cast<size_t>(dynamic));  // a Table is built in place, never moved
  for (int t = 0; t < model.tables_size(); ++t)
    if (slot_of_table[t] >= 0) tables_.emplace_back(config, t);
  for (const auto& feature : model.sparse_features())
    slot_of_feature_.push_back(slot_of_table[FindTable(model, feature.table())]);
  step_rows_.resize(tables_.size());
  slot_steps_.resize(tables_.size());
}

void DynamicTables::Gather(const ValidatedBatch& batch, size_t slot,
                           std::vector<int64_t>* ids) const {
  const int64_t B = batch.view.batch_size;
  ids->clear();
  for (size_t f = 0; f < slot_of_feature_.size(); ++f) {
    if (slot_of_feature_[f] != static_cast<int>(slot)) continue;
    const auto feature = static_cast<int32_t>(f);
    ids->insert(ids->end(), batch.view.ids + batch.bag_begin(feature, 0),
                batch.view.ids + batch.bag_end(feature, B - 1));
  }
}

const ValidatedBatch& DynamicTables::ResolveForStep(const ValidatedBatch& batch, int64_t step,
                                                    std::vector<EmbeddingTable<float>>* tables,
                                                    SparseOptimizer<float>* optimizer,
                                                    ThreadPool* pool) {
  // A table's rows, optimizer state and DynamicRows are its own: tables run in parallel.
  ParallelFor(pool, static_cast<int64_t>(tables_.size()), [&](int64_t i) {
    const auto slot = static_cast<size_t>(i);
    Table& table = tables_[slot];
    SlotStep& s = slot_steps_[slot];
    Gather(batch, slot, &s.gathered);
    step_rows_[slot].resize(s.gathered.size());
    table.rows.Resolve(s.gathered.data(), static_cast<int64_t>(s.gathered.size()), step,
                       step_rows_[slot].data(), &s.changes, &s.undo);
    SaveAdmitted(table, s.changes, tables, optimizer, &s.overwritten);
    InitializeAdmitted(table, s.changes, tables, optimizer);
  });
  can_roll_back_ = true;
  Rewrite(batch, step_rows_, &step_batch_);
  return step_batch_.batch();
}

// Each state buffer holds a fixed number of values per row: its size / the table's rows.
void DynamicTables::SaveAdmitted(const Table& table, const RowChanges& changes,
                                 std::vector<EmbeddingTable<float>>* tables,
                                 SparseOptimizer<float>* optimizer, Overwritten* saved) const {
  const EmbeddingTable<float>& weights = (*tables)[static_cast<size_t>(table.index)];
  const auto rows = static_cast<size_t>(weights.num_rows());
  saved->rows.clear();
  saved->values.clear();
  for (const auto& [id, row] : changes.admitted) {
    saved->rows.push_back(row);
    saved->values.insert(saved->values.end(), weights.row(row), weights.row(row) + weights.dim());
    for (const auto& [name, buffer] : optimizer->StateBuffers(table.index)) {
      const size_t width = buffer->size() / rows;
      const float* state = buffer->data() + static_cast<size_t>(row) * width;
      saved->values.insert(saved->values.end(), state, state + width);
    }
  }
}

void DynamicTables::RollBackStep(std::vector<EmbeddingTable<float>>* tables,
                                 SparseOptimizer<float>* optimizer) {
  DLRM_INTERNAL_CHECK(can_roll_back_);
  can_roll_back_ = false;
  for (size_t slot = tables_.size(); slot-- > 0;) {
    const Table& table = tables_[slot];
    EmbeddingTable<float>& weights = (*tables)[static_cast<size_t>(table.index)];
    const auto rows = static_cast<size_t>(weights.num_rows());
    const Overwritten& saved = slot_steps_[slot].overwritten;
    const float* value = saved.values.data();
    for (const int64_t row : saved.rows) {
      std::copy(value, value + weights.dim(), weights.row(row));
      value += weights.dim();
      for (const auto& [name, buffer] : optimizer->StateBuffers(table.index)) {
        const size_t width = buffer->size() / rows;
        std::copy(value, value + width, buffer->data() + static_cast<size_t>(row) * width);
        value += width;
      }
    }
    tables_[slot].rows.Undo(slot_steps_[slot].undo);
  }
}

void DynamicTables::InitializeAdmitted(const Table& table, const RowChanges& changes,
                                       std::vector<EmbeddingTable<float>>* tables,
                                       SparseOptimizer<float>* optimizer) const {
  if (changes.admitted.empty()) return;
  (*tables)[static_cast<size_t>(table.index)].InitializeForIds(table.initializer, table.seed,
                                                               table.index, changes.admitted);
  for (const auto& [id, row] : changes.admitted) optimizer->ResetRow(table.index, row);
}

void DynamicTables::LookupRows(const ValidatedBatch& batch, RowBatch* out) const {
  std::vector<std::vector<int64_t>> rows(tables_.size());
  std::vector<int64_t> ids;
  for (size_t slot = 0; slot < tables_.size(); ++slot) {
    Gather(batch, slot, &ids);
    rows[slot].resize(ids.size());
    tables_[slot].rows.index().FindBatch(ids.data(), static_cast<int64_t>(ids.size()),
                                         rows[slot].data());
  }
  Rewrite(batch, rows, out);
}

void DynamicTables::Rewrite(const ValidatedBatch& batch,
                            const std::vector<std::vector<int64_t>>& rows, RowBatch* out) const {
  const BatchView& in = batch.view;
  const int64_t B = in.batch_size;
  const auto bags = static_cast<size_t>(in.num_sparse) * static_cast<size_t>(B);
  out->lengths_.resize(bags);
  out->ids_.clear();
  out->weights_.clear();
  out->valid_.offsets.resize(bags + 1);
  std::vector<size_t> cursor(tables_.size(), 0);
  for (int32_t f = 0; f < in.num_sparse; ++f) {
    const int slot = slot_of_feature_[static_cast<size_t>(f)];
    const int64_t default_row = slot < 0 ? -1 : tables_[static_cast<size_t>(slot)].default_row;
    for (int64_t b = 0; b < B; ++b) {
      const size_t bag = static_cast<size_t>(f) * static_cast<size_t>(B) + static_cast<size_t>(b);
      out->valid_.offsets[bag] = static_cast<int64_t>(out->ids_.size());
      for (int64_t i = batch.bag_begin(f, b); i < batch.bag_end(f, b); ++i) {
        int64_t id = in.ids[i];
        if (slot >= 0) {
          id = rows[static_cast<size_t>(slot)][cursor[static_cast<size_t>(slot)]++];
          if (id == DynamicRows::kNoRow) id = default_row;
          if (id < 0) continue;  // ZERO: left out of its bag
        }
        out->ids_.push_back(id);
        if (in.weights != nullptr) out->weights_.push_back(in.weights[i]);
      }
      out->lengths_[bag] =
          static_cast<int32_t>(static_cast<int64_t>(out->ids_.size()) - out->valid_.offsets[bag]);
    }
  }
  out->valid_.offsets[bags] = static_cast<int64_t>(out->ids_.size());
  out->valid_.view = in;
  out->valid_.view.lengths = out->lengths_.data();
  out->valid_.view.num_ids = static_cast<int64_t>(out->ids_.size());
  out->valid_.view.ids = out->ids_.data();
  out->valid_.view.weights = in.weights != nullptr ? out->weights_.data() : nullptr;
}

std::vector<int32_t> DynamicTables::table_indices() const {
  std::vector<int32_t> indices;
  for (const Table& table : tables_) indices.push_back(table.index);
  return indices;
}

const DynamicRows& DynamicTables::rows(int32_t table_index) const {
  for (const Table& table : tables_)
    if (table.index == table_index) return table.rows;
  Throw(StatusCode::kNotFound, "table ", table_index, " is not a DYNAMIC table");
}

void DynamicTables::Restore(const std::vector<DynamicRowsSnapshot>& snapshots) {
  DLRM_INTERNAL_CHECK(snapshots.size() == tables_.size());
  for (size_t slot = 0; slot < tables_.size(); ++slot) {
    try {
      tables_[slot].rows.Restore(snapshots[slot]);
    } catch (const Error& e) {
      Throw(e.code(), "dynamic table \"", tables_[slot].name, "\": ", e.what());
    }
  }
}

}  // namespace dlrm

#include "engine/model/dynamic_tables.h"

#include <algorithm>
#include <exception>
#include <filesystem>
#include <utility>

#include "engine/config/config.h"
#include "engine/core/status.h"
#include "engine/embedding/packed_row.h"

namespace dlrm {

namespace {

bool Translated(const config::TableConfig& table) {
  return table.kind() == config::TableConfig::DYNAMIC || table.has_ssd();
}

DynamicRowsOptions RowsOptionsFor(const config::DlrmConfig& config, int32_t table_index) {
  const config::TableConfig& table = config.model().tables(table_index);
  if (table.has_ssd()) return SsdCacheOptionsFor(ResidentRows(config, table_index));
  return DynamicRowsOptionsFor(table, config.seed(), table_index);
}

// The SSD tables' row store in `dir`: one log per table, of its rows and stored width.
RowStoreOptions StoreOptions(const config::DlrmConfig& config, const std::string& dir) {
  RowStoreOptions options;
  options.path = dir + "/rows";
  for (int t = 0; t < config.model().tables_size(); ++t)
    if (config.model().tables(t).has_ssd())
      options.tables.push_back({t, config.model().tables(t).num_rows(), SsdRowWidth(config, t),
                                config.model().tables(t).ssd().segment_bytes()});
  return options;
}

}  // namespace

DynamicTables::Table::Table(const config::DlrmConfig& config, int32_t table_index)
    : index(table_index),
      name(config.model().tables(table_index).name()),
      default_row(config.model().tables(table_index).kind() == config::TableConfig::DYNAMIC &&
                          config.model().tables(table_index).dynamic().unadmitted() ==
                              config::DynamicTableConfig::DEFAULT_ROW
                      ? config.model().tables(table_index).num_rows() - 1
                      : -1),
      initializer(config.model().tables(table_index).initializer()),
      seed(config.seed()),
      rows(RowsOptionsFor(config, table_index)) {}

DynamicTables::DynamicTables(const config::DlrmConfig& config) {
  const config::ModelConfig& model = config.model();
  std::vector<int> slot_of_table(static_cast<size_t>(model.tables_size()), -1);
  int translated = 0;
  bool ssd = false;
  for (int t = 0; t < model.tables_size(); ++t) {
    if (Translated(model.tables(t))) slot_of_table[t] = translated++;
    ssd = ssd || model.tables(t).has_ssd();
  }
  if (ssd) {
    store_dir_ = std::make_unique<ScratchDir>(
        config.ssd_dir().empty() ? TempDirectory() : config.ssd_dir(), "dlrm-ssd-");
    store_options_ = StoreOptions(config, store_dir_->path());
    store_ = std::make_unique<RowStore>(store_options_);
  }
  tables_.reserve(static_cast<size_t>(translated));  // a Table is built in place, never moved
  for (int t = 0; t < model.tables_size(); ++t) {
    if (slot_of_table[t] < 0) continue;
    tables_.emplace_back(config, t);
    if (model.tables(t).has_ssd())
      tables_.back().ssd = std::make_unique<SsdTier>(config, t, store_.get());
  }
  for (const auto& feature : model.sparse_features())
    slot_of_feature_.push_back(slot_of_table[FindTable(model, feature.table())]);
  step_rows_.resize(tables_.size());
  slot_steps_.resize(tables_.size());
}

DynamicTables::~DynamicTables() { WaitForReadAhead(); }

void DynamicTables::WaitForReadAhead() {
  if (!read_ahead_.valid()) return;
  try {
    read_ahead_.get();
  } catch (...) {
    for (Table& table : tables_)
      if (table.ssd) table.ssd->DropReadAhead();
  }
}

void DynamicTables::DropReadAhead() {
  WaitForReadAhead();
  for (Table& table : tables_)
    if (table.ssd) table.ssd->DropReadAhead();
}

void DynamicTables::ReadAheadForNext(const ValidatedBatch& next) {
  WaitForReadAhead();
  std::vector<std::pair<SsdTier*, std::vector<int64_t>>> work;
  std::vector<int64_t> rows;
  for (size_t slot = 0; slot < tables_.size(); ++slot) {
    if (!tables_[slot].ssd) continue;
    Gather(next, slot, &rows);
    work.emplace_back(tables_[slot].ssd.get(),
                      tables_[slot].ssd->RowsToReadAhead(tables_[slot].rows, rows));
  }
  read_ahead_ = std::async(std::launch::async, [work = std::move(work)]() mutable {
    for (auto& [tier, ahead] : work) tier->ReadAhead(std::move(ahead));
  });
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
                                                    ThreadPool* pool, const RowRefresh& refresh) {
  WaitForReadAhead();
  ForgetChanges();
  // A table's rows, optimizer state and DynamicRows are its own: tables run in parallel.
  std::vector<std::exception_ptr> failed(tables_.size());
  ParallelFor(pool, static_cast<int64_t>(tables_.size()), [&](int64_t i) {
    const auto slot = static_cast<size_t>(i);
    Gather(batch, slot, &slot_steps_[slot].gathered);
    try {
      ResolveTable(slot, step, tables, optimizer, refresh);
    } catch (...) {
      failed[slot] = std::current_exception();
    }
  });
  for (size_t slot = 0; slot < tables_.size(); ++slot) {
    if (!failed[slot]) continue;
    // The failed tables changed nothing; the others are taken back.
    for (size_t other = 0; other < tables_.size(); ++other)
      if (!failed[other]) RollBackSlot(other, tables, optimizer);
    std::rethrow_exception(failed[slot]);
  }
  can_roll_back_ = true;
  Rewrite(batch, step_rows_, &step_batch_);
  return step_batch_.batch();
}

void DynamicTables::ResolveTable(size_t slot, int64_t step,
                                 std::vector<EmbeddingTable<float>>* tables,
                                 SparseOptimizer<float>* optimizer, const RowRefresh& refresh) {
  Table& table = tables_[slot];
  SlotStep& s = slot_steps_[slot];
  step_rows_[slot].resize(s.gathered.size());
  table.rows.Resolve(s.gathered.data(), static_cast<int64_t>(s.gathered.size()),
                     table.StepFor(step), step_rows_[slot].data(), &s.changes, &s.undo);
  if (table.ssd) {
    // The cache's slots round as the table rows they hold (updates come this step).
    (*tables)[static_cast<size_t>(table.index)].KeyRoundingBy(table.rows.ids_of_rows());
    MoveSsdRows(slot, tables, optimizer, refresh);
    table.ssd->MarkDirty(step_rows_[slot], &s.dirty_before);  // the step is about to update them
    return;
  }
  try {
    SaveAdmitted(table, s.changes, tables, optimizer, &s.overwritten);
  } catch (...) {
    table.rows.Undo(s.undo);
    s.overwritten.rows.clear();
    throw;
  }
  try {
    InitializeAdmitted(table, s.changes, tables, optimizer);
  } catch (...) {  // the admitted rows' values and state as they were, then the ids
    RollBackSlot(slot, tables, optimizer);
    s.overwritten.rows.clear();
    throw;
  }
}

void DynamicTables::MoveSsdRows(size_t slot, std::vector<EmbeddingTable<float>>* tables,
                                SparseOptimizer<float>* optimizer, const RowRefresh& refresh) {
  Table& table = tables_[slot];
  SlotStep& s = slot_steps_[slot];
  EmbeddingTable<float>* cache = &(*tables)[static_cast<size_t>(table.index)];
  try {
    const std::vector<int64_t>& slots = step_rows_[slot];
    if (std::find(slots.begin(), slots.end(), DynamicRows::kNoRow) != slots.end()) {
      std::vector<int64_t> distinct = s.gathered;
      std::sort(distinct.begin(), distinct.end());
      Throw(StatusCode::kResourceExhausted, "SSD table \"", table.name, "\": the batch uses ",
            std::unique(distinct.begin(), distinct.end()) - distinct.begin(),
            " distinct rows but its cache holds ", table.rows.options().capacity, " (model.tables[",
            table.index, "].ssd.cache_bytes); raise it or send smaller batches");
    }
    if (refresh && !s.changes.evicted.empty()) {  // the evicted slots' values, current
      std::vector<int64_t> evicted;
      for (const auto& [row, cache_slot] : s.changes.evicted) evicted.push_back(cache_slot);
      refresh({table.index, &evicted});
    }
    table.ssd->WriteBack(s.changes, cache, optimizer);
    SaveAdmitted(table, s.changes, tables, optimizer, &s.overwritten);
    table.ssd->Fill(s.changes, cache, optimizer);
  } catch (...) {
    table.rows.Undo(s.undo);     // WriteBack and Fill changed nothing the math sees
    s.overwritten.rows.clear();  // nor any row (ChangedByLastResolve)
    throw;
  }
}

void DynamicTables::SaveAdmitted(const Table& table, const RowChanges& changes,
                                 std::vector<EmbeddingTable<float>>* tables,
                                 SparseOptimizer<float>* optimizer, Overwritten* saved) const {
  saved->rows.clear();
  for (const auto& [id, row] : changes.admitted) saved->rows.push_back(row);
  PackRows((*tables)[static_cast<size_t>(table.index)], optimizer->StateBuffers(table.index),
           saved->rows, &saved->values);
}

void DynamicTables::ForgetChanges() {
  for (SlotStep& s : slot_steps_) s.overwritten.rows.clear();
}

std::vector<ChangedRows> DynamicTables::ChangedByLastResolve() const {
  std::vector<ChangedRows> changed;
  for (size_t slot = 0; slot < tables_.size(); ++slot)
    if (!slot_steps_[slot].overwritten.rows.empty())
      changed.push_back({tables_[slot].index, &slot_steps_[slot].overwritten.rows});
  return changed;
}

void DynamicTables::RollBackStep(std::vector<EmbeddingTable<float>>* tables,
                                 SparseOptimizer<float>* optimizer) {
  DLRM_INTERNAL_CHECK(can_roll_back_);
  can_roll_back_ = false;
  for (size_t slot = tables_.size(); slot-- > 0;) RollBackSlot(slot, tables, optimizer);
}

void DynamicTables::RollBackSlot(size_t slot, std::vector<EmbeddingTable<float>>* tables,
                                 SparseOptimizer<float>* optimizer) {
  const Table& table = tables_[slot];
  const Overwritten& saved = slot_steps_[slot].overwritten;
  UnpackRows(saved.values.data(), optimizer->StateBuffers(table.index), saved.rows,
             &(*tables)[static_cast<size_t>(table.index)]);
  if (table.ssd) table.ssd->RestoreDirty(step_rows_[slot], slot_steps_[slot].dirty_before);
  tables_[slot].rows.Undo(slot_steps_[slot].undo);
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
  DLRM_INTERNAL_CHECK(!has_ssd());
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

void DynamicTables::ResolveForPredict(const ValidatedBatch& batch, int64_t step,
                                      std::vector<EmbeddingTable<float>>* tables,
                                      SparseOptimizer<float>* optimizer, RowBatch* out,
                                      const RowRefresh& refresh) {
  WaitForReadAhead();
  can_roll_back_ = false;  // the slot steps are reused
  ForgetChanges();
  for (size_t slot = 0; slot < tables_.size(); ++slot) {
    Table& table = tables_[slot];
    SlotStep& s = slot_steps_[slot];
    Gather(batch, slot, &s.gathered);
    step_rows_[slot].resize(s.gathered.size());
    if (!table.ssd) {
      table.rows.index().FindBatch(s.gathered.data(), static_cast<int64_t>(s.gathered.size()),
                                   step_rows_[slot].data());
      continue;
    }
    table.rows.Resolve(s.gathered.data(), static_cast<int64_t>(s.gathered.size()),
                       table.StepFor(step), step_rows_[slot].data(), &s.changes, &s.undo);
    // A failed table is undone; the others' moves changed no value (and are in
    // ChangedByLastResolve).
    MoveSsdRows(slot, tables, optimizer, refresh);
  }
  Rewrite(batch, step_rows_, out);
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
  for (const Table& table : tables_)
    if (!table.ssd) indices.push_back(table.index);
  return indices;
}

std::vector<int32_t> DynamicTables::ssd_table_indices() const {
  std::vector<int32_t> indices;
  for (const Table& table : tables_)
    if (table.ssd) indices.push_back(table.index);
  return indices;
}

std::vector<const int64_t*> DynamicTables::CacheRowKeys(size_t num_tables) const {
  std::vector<const int64_t*> keys(num_tables, nullptr);
  for (const Table& table : tables_)
    if (table.ssd) keys.at(static_cast<size_t>(table.index)) = table.rows.ids_of_rows();
  return keys;
}

size_t DynamicTables::SlotOf(int32_t table_index) const {
  for (size_t slot = 0; slot < tables_.size(); ++slot)
    if (tables_[slot].index == table_index) return slot;
  Throw(StatusCode::kNotFound, "table ", table_index, " is neither DYNAMIC nor on the SSD tier");
}

const DynamicRows& DynamicTables::rows(int32_t table_index) const {
  return tables_[SlotOf(table_index)].rows;
}

const SsdTier& DynamicTables::ssd(int32_t table_index) const {
  const Table& table = tables_[SlotOf(table_index)];
  if (!table.ssd) Throw(StatusCode::kNotFound, "table ", table_index, " is not on the SSD tier");
  return *table.ssd;
}

void DynamicTables::Restore(const std::vector<DynamicRowsSnapshot>& snapshots) {
  size_t next = 0;
  for (Table& table : tables_) {
    if (table.ssd) continue;
    DLRM_INTERNAL_CHECK(next < snapshots.size());
    try {
      table.rows.Restore(snapshots[next++]);
    } catch (const Error& e) {
      Throw(e.code(), "dynamic table \"", table.name, "\": ", e.what());
    }
  }
  DLRM_INTERNAL_CHECK(next == snapshots.size());
}

void DynamicTables::FlushAndCopyStore(const std::string& dir,
                                      std::vector<EmbeddingTable<float>>* tables,
                                      SparseOptimizer<float>* optimizer) {
  DLRM_INTERNAL_CHECK(has_ssd());
  WaitForReadAhead();
  for (Table& table : tables_)
    if (table.ssd)
      table.ssd->Flush(table.rows, &(*tables)[static_cast<size_t>(table.index)], optimizer);
  store_->CopyTo(dir);
}

void DynamicTables::RestoreStore(const std::string& dir,
                                 std::vector<std::vector<uint64_t>> stored) {
  DLRM_INTERNAL_CHECK(has_ssd());
  DropReadAhead();  // of the store being replaced
  // Checked and opened beside the current store, which stays until all of it worked.
  std::vector<SsdTier*> tiers;
  for (Table& table : tables_) {
    if (!table.ssd) continue;
    DLRM_INTERNAL_CHECK(table.rows.size() == 0);
    const size_t i = tiers.size();
    DLRM_INTERNAL_CHECK(i < stored.size());
    if (stored[i].size() != table.ssd->stored_words().size())
      Throw(StatusCode::kDataLoss, "SSD table \"", table.name, "\": the stored-rows bitmap has ",
            stored[i].size(), " words, not ", table.ssd->stored_words().size());
    tiers.push_back(table.ssd.get());
  }
  DLRM_INTERNAL_CHECK(tiers.size() == stored.size());
  auto store_dir = std::make_unique<ScratchDir>(
      std::filesystem::path(store_dir_->path()).parent_path().string(), "dlrm-ssd-");
  RowStoreOptions options = store_options_;
  options.path = store_dir->path() + "/rows";
  CopyDirectoryLinking(dir, options.path);
  auto store = std::make_unique<RowStore>(options);
  for (size_t i = 0; i < tiers.size(); ++i) {
    tiers[i]->RepointStore(store.get());
    tiers[i]->RestoreStored(std::move(stored[i]));  // sizes checked above: cannot throw
  }
  store_.swap(store);
  store_dir_.swap(store_dir);
  store_options_ = std::move(options);
  store.reset();  // the old store closes before its directory goes
}

void DynamicTables::ReadSsdRows(int32_t table_index,
                                const std::vector<EmbeddingTable<float>>& tables, int64_t first,
                                int64_t n, float* out) const {
  const Table& table = tables_[SlotOf(table_index)];
  DLRM_INTERNAL_CHECK(table.ssd != nullptr);
  table.ssd->ReadRows(table.rows, tables[static_cast<size_t>(table_index)], first, n, out);
}

}  // namespace dlrm

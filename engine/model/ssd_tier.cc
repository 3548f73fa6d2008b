#include "engine/model/ssd_tier.h"

#include <algorithm>

#include "engine/config/config.h"
#include "engine/core/status.h"

namespace dlrm {
namespace {

// Rows per store call when flushing or reading a range: bounds the staging buffers.
constexpr int64_t kChunkRows = 4096;

}  // namespace

int64_t SsdRowWidth(const config::DlrmConfig& config, int32_t table_index) {
  const config::TableConfig& table = config.model().tables(table_index);
  return PackedWeightWidth(table.precision(), table.dim()) +
         SparseStateBytesPerRow(config.sparse_optimizer(), table.dim()) /
             static_cast<int64_t>(sizeof(float));
}

SsdTier::SsdTier(const config::DlrmConfig& config, int32_t table_index, RowStore* store)
    : store_(store),
      table_index_(table_index),
      name_(config.model().tables(table_index).name()),
      initializer_(config.model().tables(table_index).initializer()),
      seed_(config.seed()),
      full_rows_(config.model().tables(table_index).num_rows()),
      dim_(config.model().tables(table_index).dim()),
      width_(SsdRowWidth(config, table_index)),
      stored_(static_cast<size_t>((full_rows_ + 63) / 64), 0),
      dirty_(static_cast<size_t>(ResidentRows(config, table_index)), 0) {}

void SsdTier::Rethrow(const Error& e) const {
  Throw(e.code(), "SSD table \"", name_, "\": ", e.what());
}

int64_t SsdTier::Width(const StateBufferList& state, const EmbeddingTable<float>& cache) const {
  const int64_t width = PackedRowWidth(cache, state);
  DLRM_INTERNAL_CHECK(width == width_);  // the optimizer keeps what the config says
  return width;
}

void SsdTier::WriteRows(const std::vector<std::pair<int64_t, int64_t>>& row_slots,
                        EmbeddingTable<float>* cache, SparseOptimizer<float>* optimizer) {
  if (row_slots.empty()) return;
  const StateBufferList state = optimizer->StateBuffers(table_index_);
  const int64_t width = Width(state, *cache);
  ids_.clear();
  packed_.resize(row_slots.size() * static_cast<size_t>(width));
  for (size_t i = 0; i < row_slots.size(); ++i) {
    ids_.push_back(row_slots[i].first);
    PackRow(*cache, state, row_slots[i].second, packed_.data() + i * static_cast<size_t>(width));
  }
  try {
    store_->Write(table_index_, ids_.data(), static_cast<int64_t>(ids_.size()), packed_.data());
  } catch (const Error& e) {
    Rethrow(e);
  }
  for (const auto& [row, slot] : row_slots) {
    MarkStored(row);
    dirty_[static_cast<size_t>(slot)] = 0;
  }
}

void SsdTier::WriteBack(const RowChanges& changes, EmbeddingTable<float>* cache,
                        SparseOptimizer<float>* optimizer) {
  std::vector<std::pair<int64_t, int64_t>> dirty;
  for (const auto& [row, slot] : changes.evicted)
    if (dirty_[static_cast<size_t>(slot)] != 0) dirty.emplace_back(row, slot);
  WriteRows(dirty, cache, optimizer);
}

void SsdTier::Fill(const RowChanges& changes, EmbeddingTable<float>* cache,
                   SparseOptimizer<float>* optimizer) {
  std::vector<std::pair<int64_t, int64_t>> read, fresh;
  for (const auto& row_slot : changes.admitted)
    (stored(row_slot.first) ? read : fresh).push_back(row_slot);
  const StateBufferList state = optimizer->StateBuffers(table_index_);
  const int64_t width = Width(state, *cache);
  packed_.resize(read.size() * static_cast<size_t>(width));
  ReadStoredOrAhead(read, packed_.data());
  // Nothing has changed until the store has answered: now the slots take their rows.
  for (size_t i = 0; i < read.size(); ++i)
    UnpackRow(packed_.data() + i * static_cast<size_t>(width), state, read[i].second, cache);
  cache->InitializeRows(initializer_, seed_, table_index_, full_rows_, fresh);
  for (const auto& [row, slot] : fresh) optimizer->ResetRow(table_index_, slot);
  for (const auto& [row, slot] : changes.admitted) dirty_[static_cast<size_t>(slot)] = 0;
}

void SsdTier::ReadStored(const std::vector<int64_t>& rows, float* values) const {
  const auto n = static_cast<int64_t>(rows.size());
  const std::unique_ptr<bool[]> found(new bool[rows.size()]);
  try {
    if (store_->Read(table_index_, rows.data(), n, values, found.get()) != n)
      Throw(StatusCode::kDataLoss, "a row written to the store is missing from it (",
            store_->path(), ")");
  } catch (const Error& e) {
    Rethrow(e);
  }
}

void SsdTier::ReadStoredOrAhead(const std::vector<std::pair<int64_t, int64_t>>& read,
                                float* values) {
  ids_.clear();  // the rows the prefetch stage did not bring, and where each goes
  std::vector<size_t> at;
  for (size_t i = 0; i < read.size(); ++i) {
    const auto it = std::lower_bound(ahead_rows_.begin(), ahead_rows_.end(), read[i].first);
    if (it != ahead_rows_.end() && *it == read[i].first) {
      const auto j = static_cast<size_t>(it - ahead_rows_.begin());
      std::copy_n(ahead_values_.data() + j * static_cast<size_t>(width_), width_,
                  values + i * static_cast<size_t>(width_));
      ++rows_read_ahead_;
    } else {
      ids_.push_back(read[i].first);
      at.push_back(i);
    }
  }
  ahead_rows_.clear();  // good for this Fill only
  std::vector<float> rest(ids_.size() * static_cast<size_t>(width_));
  ReadStored(ids_, rest.data());
  for (size_t k = 0; k < at.size(); ++k)
    std::copy_n(rest.data() + k * static_cast<size_t>(width_), width_,
                values + at[k] * static_cast<size_t>(width_));
}

std::vector<int64_t> SsdTier::RowsToReadAhead(const DynamicRows& map,
                                              std::vector<int64_t> rows) const {
  std::sort(rows.begin(), rows.end());
  rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
  std::vector<int64_t> slots(rows.size());
  map.index().FindBatch(rows.data(), static_cast<int64_t>(rows.size()), slots.data());
  size_t kept = 0;
  for (size_t i = 0; i < rows.size(); ++i)
    if (slots[i] == DynamicRows::kNoRow && stored(rows[i])) rows[kept++] = rows[i];
  rows.resize(kept);
  return rows;
}

void SsdTier::ReadAhead(std::vector<int64_t> rows) {
  std::vector<float> values(rows.size() * static_cast<size_t>(width_));
  ReadStored(rows, values.data());
  ahead_rows_ = std::move(rows);
  ahead_values_ = std::move(values);
}

void SsdTier::MarkDirty(const std::vector<int64_t>& slots, std::vector<uint8_t>* before) {
  before->resize(slots.size());
  for (size_t i = 0; i < slots.size(); ++i) {
    uint8_t& mark = dirty_[static_cast<size_t>(slots[i])];
    (*before)[i] = mark;
    mark = 1;
  }
}

void SsdTier::RestoreDirty(const std::vector<int64_t>& slots, const std::vector<uint8_t>& before) {
  DLRM_INTERNAL_CHECK(before.size() == slots.size());
  for (size_t i = slots.size(); i-- > 0;)  // a slot used twice: its first mark last
    dirty_[static_cast<size_t>(slots[i])] = before[i];
}

void SsdTier::Flush(const DynamicRows& map, EmbeddingTable<float>* cache,
                    SparseOptimizer<float>* optimizer) {
  std::vector<std::pair<int64_t, int64_t>> dirty;
  map.ForEachByRecency([&](int64_t row, int64_t slot) {
    if (dirty_[static_cast<size_t>(slot)] != 0) dirty.emplace_back(row, slot);
  });
  std::sort(dirty.begin(), dirty.end());
  for (size_t begin = 0; begin < dirty.size(); begin += kChunkRows) {
    const size_t end = std::min(dirty.size(), begin + static_cast<size_t>(kChunkRows));
    WriteRows({dirty.begin() + static_cast<std::ptrdiff_t>(begin),
               dirty.begin() + static_cast<std::ptrdiff_t>(end)},
              cache, optimizer);
  }
}

void SsdTier::ReadRows(const DynamicRows& map, const EmbeddingTable<float>& cache, int64_t first,
                       int64_t n, float* out) const {
  DLRM_INTERNAL_CHECK(first >= 0 && n >= 0 && first + n <= full_rows_);
  std::vector<int64_t> rows(static_cast<size_t>(n)), slots(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) rows[static_cast<size_t>(i)] = first + i;
  map.index().FindBatch(rows.data(), n, slots.data());
  std::vector<std::pair<int64_t, int64_t>> fresh;  // (row, where in out)
  std::vector<int64_t> read;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t slot = slots[static_cast<size_t>(i)], row = first + i;
    if (slot != DynamicRows::kNoRow)
      cache.ReadRow(slot, out + i * dim_);
    else if (stored(row))
      read.push_back(row);
    else
      fresh.emplace_back(row, i);
  }
  if (!read.empty()) {
    std::vector<float> values(read.size() * static_cast<size_t>(width_));
    ReadStored(read, values.data());
    for (size_t j = 0; j < read.size(); ++j)
      PackedWeights(values.data() + j * static_cast<size_t>(width_), cache.precision(), dim_,
                    out + (read[j] - first) * dim_);
  }
  if (fresh.empty()) return;
  EmbeddingTable<float> scratch(name_, static_cast<int64_t>(fresh.size()), dim_, cache.precision());
  std::vector<std::pair<int64_t, int64_t>> row_slots;
  for (size_t j = 0; j < fresh.size(); ++j)
    row_slots.emplace_back(fresh[j].first, static_cast<int64_t>(j));
  scratch.InitializeRows(initializer_, seed_, table_index_, full_rows_, row_slots);
  for (size_t j = 0; j < fresh.size(); ++j)
    scratch.ReadRow(static_cast<int64_t>(j), out + fresh[j].second * dim_);
}

void SsdTier::RestoreStored(std::vector<uint64_t> words) {
  if (words.size() != stored_.size())
    Throw(StatusCode::kDataLoss, "SSD table \"", name_, "\": the stored-rows bitmap has ",
          words.size(), " words, not ", stored_.size(), " (one bit per row of ", full_rows_, ")");
  stored_ = std::move(words);
}

}  // namespace dlrm

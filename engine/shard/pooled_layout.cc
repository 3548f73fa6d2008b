#include "engine/shard/pooled_layout.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "engine/core/status.h"
#include "engine/shard/planner.h"

namespace dlrm::shard {
namespace {

using Type = config::ShardingConfig::Type;

int32_t TableIndex(const config::ModelConfig& model, const std::string& name) {
  for (int t = 0; t < model.tables_size(); ++t)
    if (model.tables(t).name() == name) return t;
  ThrowInvalid("sparse feature table \"", name, "\" is not a model table");
}

// The plan's shards of each table, in column order; checks that they cover it.
std::vector<std::vector<const TableShard*>> ShardsByTable(const config::ModelConfig& model,
                                                          const ShardingPlan& plan) {
  std::vector<std::vector<const TableShard*>> by_table(model.tables_size());
  for (const TableShard& s : plan.shards()) {
    if (s.table_index() < 0 || s.table_index() >= model.tables_size())
      ThrowInvalid("plan shard of table \"", s.table(), "\" has table_index ", s.table_index(),
                   ", outside [0, ", model.tables_size(), ")");
    by_table[s.table_index()].push_back(&s);
  }
  for (auto& shards : by_table)
    std::sort(shards.begin(), shards.end(), [](const TableShard* a, const TableShard* b) {
      return a->col_begin() < b->col_begin();
    });
  return by_table;
}

// kInvalidArgument unless `shards` tile table t: every row, columns [0, dim) in order.
void CheckCovers(const config::TableConfig& table, const std::vector<const TableShard*>& shards) {
  if (shards.empty()) ThrowInvalid("the plan has no shard of table \"", table.name(), "\"");
  int32_t next_col = 0;
  for (const TableShard* s : shards) {
    const Type type = s->type();
    if (type == config::ShardingConfig::TABLE_ROW_WISE)
      ThrowInvalid("table \"", table.name(), "\" is sharded ",
                   config::ShardingConfig::Type_Name(type),
                   ": trainers that own their shards take TABLE_WISE, COLUMN_WISE, ROW_WISE and "
                   "DATA_PARALLEL shards, one type per table");
    if (s->row_begin() != 0 || s->row_end() != table.num_rows() || s->col_begin() != next_col ||
        s->col_end() <= s->col_begin())
      ThrowInvalid("table \"", table.name(), "\": shard rows [", s->row_begin(), ", ", s->row_end(),
                   ") x columns [", s->col_begin(), ", ", s->col_end(),
                   ") does not continue a tiling of ", table.num_rows(), " rows x columns [0, ",
                   table.dim(), ")");
    next_col = s->col_end();
  }
  if (next_col != table.dim())
    ThrowInvalid("table \"", table.name(), "\": its shards cover columns [0, ", next_col, ") of ",
                 table.dim());
}

// A row-wise piece: a ROW_WISE shard of some of the table's rows (one of all rows is a
// whole table, pooled by its holder as the store does: ps::ShardRoles).
bool IsRowPiece(const config::TableConfig& table, const TableShard* s) {
  return s->type() == config::ShardingConfig::ROW_WISE &&
         (s->row_begin() != 0 || s->row_end() != table.num_rows());
}

// kInvalidArgument unless `shards` are row-wise pieces tiling the table's rows in whole
// columns, each on its own rank of [0, world_size).
std::vector<RowPiece> RowPiecesOf(const config::TableConfig& table,
                                  std::vector<const TableShard*> shards, int32_t world_size) {
  std::sort(shards.begin(), shards.end(), [](const TableShard* a, const TableShard* b) {
    return a->row_begin() < b->row_begin();
  });
  std::vector<RowPiece> pieces;
  std::vector<bool> taken(static_cast<size_t>(world_size), false);
  int64_t next_row = 0;
  for (const TableShard* s : shards) {
    if (s->type() != config::ShardingConfig::ROW_WISE)
      ThrowInvalid("table \"", table.name(), "\" mixes ROW_WISE pieces with a ",
                   config::ShardingConfig::Type_Name(s->type()), " shard");
    const int32_t rank = s->server();
    if (rank < 0 || rank >= world_size)
      ThrowInvalid("table \"", table.name(), "\": shard on server ", rank, ", outside [0, ",
                   world_size, ")");
    if (taken[rank])
      ThrowInvalid("rank ", rank, " holds two row-wise pieces of table \"", table.name(),
                   "\"; a table's pieces are on distinct ranks");
    taken[rank] = true;
    if (s->row_begin() != next_row || s->row_end() <= s->row_begin() || s->col_begin() != 0 ||
        s->col_end() != table.dim())
      ThrowInvalid("table \"", table.name(), "\": shard rows [", s->row_begin(), ", ", s->row_end(),
                   ") x columns [", s->col_begin(), ", ", s->col_end(),
                   ") does not continue a tiling of rows [0, ", table.num_rows(),
                   ") x columns [0, ", table.dim(), ")");
    pieces.push_back({rank, s->row_begin(), s->row_end()});
    next_row = s->row_end();
  }
  if (next_row != table.num_rows())
    ThrowInvalid("table \"", table.name(), "\": its row-wise pieces cover rows [0, ", next_row,
                 ") of ", table.num_rows());
  return pieces;
}

// Feature-major id offsets of a batch: starts[f] is where feature f's ids begin.
std::vector<int64_t> FeatureStarts(const int32_t* lengths, int32_t num_features, int64_t n) {
  std::vector<int64_t> starts(static_cast<size_t>(num_features) + 1, 0);
  for (int32_t f = 0; f < num_features; ++f) {
    int64_t total = 0;
    for (int64_t i = 0; i < n; ++i) total += lengths[f * n + i];
    starts[f + 1] = starts[f] + total;
  }
  return starts;
}

// Appends feature f's bags of `from` (n samples, features-major) to `to`.
void AppendFeature(const BatchView& from, const std::vector<int64_t>& starts, int32_t f,
                   bool weighted, OwnedBatch* to) {
  const int64_t n = from.batch_size;
  to->lengths.insert(to->lengths.end(), from.lengths + f * n, from.lengths + (f + 1) * n);
  to->ids.insert(to->ids.end(), from.ids + starts[f], from.ids + starts[f + 1]);
  if (!weighted) return;
  if (from.weights != nullptr)
    to->weights.insert(to->weights.end(), from.weights + starts[f], from.weights + starts[f + 1]);
  else  // a weight of 1 is what an unweighted bag means
    to->weights.insert(to->weights.end(), static_cast<size_t>(starts[f + 1] - starts[f]), 1.0f);
}

// The bags of `features` of `batch` (feature-major, `starts` its FeatureStarts).
OwnedBatch SelectFeatures(const BatchView& batch, const std::vector<int64_t>& starts,
                          const std::vector<int32_t>& features) {
  OwnedBatch part;
  part.batch_size = batch.batch_size;
  part.num_sparse = static_cast<int32_t>(features.size());
  for (const int32_t f : features) AppendFeature(batch, starts, f, batch.weights != nullptr, &part);
  return part;
}

// kInvalidArgument naming part q unless it is a well-formed part of `num_features`
// features over its batch_size samples (at most kMaxBatchSize: a rank's validated batch, so
// that the joined sizes and the lengths' count cannot overflow).
void CheckPart(const OwnedBatch& part, int32_t q, int32_t num_features) {
  if (part.batch_size < 0 || part.batch_size > kMaxBatchSize)
    ThrowInvalid("input part from rank ", q, " has batch_size ", part.batch_size, ", outside [0, ",
                 kMaxBatchSize, "]");
  const int64_t n = part.batch_size;
  if (part.num_sparse != num_features ||
      part.lengths.size() != static_cast<size_t>(num_features) * static_cast<size_t>(n))
    ThrowInvalid("input part from rank ", q, " has ", part.num_sparse, " features x ",
                 part.batch_size, " samples (", part.lengths.size(), " lengths); expected ",
                 num_features, " x ", n);
  int64_t total = 0;
  for (const int32_t len : part.lengths) {
    if (len < 0) ThrowInvalid("input part from rank ", q, " has a negative length ", len);
    total += len;
  }
  if (total != static_cast<int64_t>(part.ids.size()) ||
      (!part.weights.empty() && part.weights.size() != part.ids.size()))
    ThrowInvalid("input part from rank ", q, " has ", part.ids.size(), " ids and ",
                 part.weights.size(), " weights; its lengths sum to ", total);
}

}  // namespace

PooledLayout::PooledLayout(const config::DlrmConfig& config, const ShardingPlan& plan,
                           int32_t world_size)
    : world_size_(world_size) {
  const config::ModelConfig& model = config.model();
  if (world_size < 1 || plan.num_servers() != world_size)
    ThrowInvalid("the plan places shards on ", plan.num_servers(), " servers but world_size is ",
                 world_size, " (one rank per GPU holds the shards)");
  owned_shards_.resize(world_size);
  owned_slices_.resize(world_size);
  owned_width_.assign(world_size, 0);
  input_features_.resize(world_size);
  range_features_.resize(world_size);
  for (const auto& feature : model.sparse_features()) {
    feature_column_.push_back(pooled_width_);
    pooled_width_ += model.tables(TableIndex(model, feature.table())).dim();
  }
  const auto by_table = ShardsByTable(model, plan);
  for (int32_t t = 0; t < model.tables_size(); ++t) {
    for (const TableShard* s : by_table[t])
      CheckShardColumns(config.sparse_optimizer(), model.tables(t), s->col_begin(), s->col_end());
    AddTable(model, t, by_table[t]);
  }
  for (int32_t r = 0; r < world_size; ++r) {
    std::vector<int32_t>& features = input_features_[r];
    std::sort(features.begin(), features.end());
    const auto twice = std::adjacent_find(features.begin(), features.end());
    if (twice != features.end()) {
      const std::string& table = model.sparse_features(*twice).table();
      ThrowInvalid("rank ", r, " holds two pieces of table \"", table, "\" (feature \"",
                   model.sparse_features(*twice).name(),
                   "\"); the pooled all-to-all needs a table's column blocks on distinct ranks");
    }
  }
  // Slices in feature order on every rank, the replicated ones too: the order of its
  // pooled rows, its exchange, and an owner's store (ps/shard_store.h).
  for (int32_t r = 0; r < world_size; ++r) owned_width_[r] = InFeatureOrder(&owned_slices_[r]);
  local_width_ = InFeatureOrder(&local_slices_);
  std::sort(local_features_.begin(), local_features_.end());
  fetched_width_ = InFeatureOrder(&fetched_slices_);
  std::sort(fetched_features_.begin(), fetched_features_.end());
  for (std::vector<int32_t>& features : range_features_)
    std::sort(features.begin(), features.end());
}

int32_t PooledLayout::InFeatureOrder(std::vector<PooledSlice>* slices) {
  std::stable_sort(slices->begin(), slices->end(), [](const PooledSlice& a, const PooledSlice& b) {
    return a.feature < b.feature;
  });
  int32_t column = 0;
  for (PooledSlice& s : *slices) {
    s.owned_column = column;
    column += s.width;
  }
  return column;
}

std::vector<PooledSlice> PooledLayout::SlicesOf(const config::ModelConfig& model, int32_t t,
                                                int32_t shard, int32_t column,
                                                int32_t width) const {
  std::vector<PooledSlice> slices;
  for (int32_t f = 0; f < model.sparse_features_size(); ++f) {
    const auto& feature = model.sparse_features(f);
    if (feature.table() != model.tables(t).name()) continue;
    PooledSlice slice;
    slice.feature = f;
    slice.shard = shard;
    slice.pooled_column = feature_column_[f] + column;
    slice.width = width;
    slice.mean = feature.pooling() == config::SparseFeatureConfig::MEAN;
    slices.push_back(slice);
  }
  return slices;
}

// Adds table t's shards to their ranks and one slice per (reading feature, shard).
void PooledLayout::AddTable(const config::ModelConfig& model, int32_t t,
                            const std::vector<const TableShard*>& shards) {
  const config::TableConfig& table = model.tables(t);
  if (std::any_of(shards.begin(), shards.end(),
                  [&](const TableShard* s) { return IsRowPiece(table, s); }))
    return AddFetchedTable(model, t, shards);
  CheckCovers(table, shards);
  for (const TableShard* s : shards) {
    const bool local = s->type() == config::ShardingConfig::DATA_PARALLEL;
    if (!local && (s->server() < 0 || s->server() >= world_size_))
      ThrowInvalid("table \"", table.name(), "\": shard on server ", s->server(), ", outside [0, ",
                   world_size_, ")");
    std::vector<OwnedShard>& holder = local ? local_shards_ : owned_shards_[s->server()];
    holder.push_back({t, s->col_begin(), s->col_end()});
    const auto shard = static_cast<int32_t>(holder.size()) - 1;
    for (const PooledSlice& slice :
         SlicesOf(model, t, shard, s->col_begin(), holder.back().width())) {
      (local ? local_slices_ : owned_slices_[s->server()]).push_back(slice);
      (local ? local_features_ : input_features_[s->server()]).push_back(slice.feature);
    }
  }
}

void PooledLayout::AddFetchedTable(const config::ModelConfig& model, int32_t t,
                                   const std::vector<const TableShard*>& shards) {
  const config::TableConfig& table = model.tables(t);
  if (shards.empty()) ThrowInvalid("the plan has no shard of table \"", table.name(), "\"");
  fetched_tables_.push_back({t, RowPiecesOf(table, shards, world_size_)});
  const auto index = static_cast<int32_t>(fetched_tables_.size()) - 1;
  for (const PooledSlice& slice : SlicesOf(model, t, index, 0, table.dim())) {
    fetched_slices_.push_back(slice);
    fetched_features_.push_back(slice.feature);
    for (const RowPiece& piece : fetched_tables_.back().pieces)
      range_features_[piece.rank].push_back(slice.feature);
  }
}

void PooledLayout::CheckRank(int32_t rank) const {
  if (rank < 0 || rank >= world_size_)
    ThrowInvalid("rank ", rank, " is outside [0, ", world_size_, ")");
}

const std::vector<OwnedShard>& PooledLayout::owned_shards(int32_t rank) const {
  CheckRank(rank);
  return owned_shards_[rank];
}

const std::vector<PooledSlice>& PooledLayout::owned_slices(int32_t rank) const {
  CheckRank(rank);
  return owned_slices_[rank];
}

int32_t PooledLayout::owned_width(int32_t rank) const {
  CheckRank(rank);
  return owned_width_[rank];
}

const std::vector<int32_t>& PooledLayout::input_features(int32_t rank) const {
  CheckRank(rank);
  return input_features_[rank];
}

const std::vector<int32_t>& PooledLayout::range_features(int32_t rank) const {
  CheckRank(rank);
  return range_features_[rank];
}

int64_t PooledLayout::SamplesPerRank(int64_t global_batch) const {
  if (global_batch < 1 || global_batch % world_size_ != 0)
    ThrowInvalid("global batch of ", global_batch, " samples is not a positive multiple of ",
                 world_size_, " ranks");
  return global_batch / world_size_;
}

std::vector<int64_t> PooledLayout::FeatureStartsOf(const BatchView& batch) const {
  if (batch.num_sparse != static_cast<int32_t>(feature_column_.size()))
    ThrowInvalid("batch.num_sparse is ", batch.num_sparse, " but the model has ",
                 feature_column_.size(), " sparse features");
  return FeatureStarts(batch.lengths, batch.num_sparse, batch.batch_size);
}

std::vector<OwnedBatch> PooledLayout::SplitInput(const BatchView& local) const {
  const std::vector<int64_t> starts = FeatureStartsOf(local);  // once for every rank's part
  std::vector<OwnedBatch> parts;
  for (int32_t r = 0; r < world_size_; ++r)
    parts.push_back(SelectFeatures(local, starts, input_features_[r]));
  return parts;
}

OwnedBatch PooledLayout::LocalInput(const BatchView& local) const {
  return SelectFeatures(local, FeatureStartsOf(local), local_features_);
}

OwnedBatch PooledLayout::FetchedInput(const BatchView& local) const {
  return SelectFeatures(local, FeatureStartsOf(local), fetched_features_);
}

OwnedBatch PooledLayout::JoinInput(int32_t rank, const std::vector<OwnedBatch>& parts) const {
  CheckRank(rank);
  if (parts.size() != static_cast<size_t>(world_size_))
    ThrowInvalid("rank ", rank, " joins ", parts.size(), " input parts; expected one from each of ",
                 world_size_, " ranks");
  const auto num_features = static_cast<int32_t>(input_features_[rank].size());
  bool weighted = false;
  OwnedBatch joined;
  for (int32_t q = 0; q < world_size_; ++q) {
    CheckPart(parts[q], q, num_features);
    weighted |= !parts[q].weights.empty();
    joined.batch_size += parts[q].batch_size;
  }
  std::vector<std::vector<int64_t>> starts;
  for (const OwnedBatch& p : parts)
    starts.push_back(FeatureStarts(p.lengths.data(), num_features, p.batch_size));
  joined.num_sparse = num_features;
  for (int32_t k = 0; k < num_features; ++k)
    for (int32_t q = 0; q < world_size_; ++q)
      AppendFeature(parts[q].view(), starts[q], k, weighted, &joined);
  return joined;
}

namespace {

// Row i of `narrow` (narrow_width columns, slice s at owned_column) into row i of `wide`
// (at pooled_column), for n rows; Gather is the inverse.
void Scatter(const std::vector<PooledSlice>& slices, int64_t n, const float* narrow,
             int32_t narrow_width, float* wide, int32_t wide_width) {
  for (const PooledSlice& s : slices)
    for (int64_t i = 0; i < n; ++i)
      std::memcpy(wide + i * wide_width + s.pooled_column,
                  narrow + i * narrow_width + s.owned_column, s.width * sizeof(float));
}

void Gather(const std::vector<PooledSlice>& slices, int64_t n, const float* wide,
            int32_t wide_width, float* narrow, int32_t narrow_width) {
  for (const PooledSlice& s : slices)
    for (int64_t i = 0; i < n; ++i)
      std::memcpy(narrow + i * narrow_width + s.owned_column,
                  wide + i * wide_width + s.pooled_column, s.width * sizeof(float));
}

void CheckBlock(const std::vector<float>& block, const char* what, int64_t b, int32_t width) {
  if (block.size() != static_cast<size_t>(b) * static_cast<size_t>(width))
    ThrowInvalid(what, " holds ", block.size(), " values; expected ", b, " samples x ", width);
}

}  // namespace

void PooledLayout::Assemble(const std::vector<std::vector<float>>& blocks,
                            const std::vector<float>& local, const std::vector<float>& fetched,
                            int64_t b, float* pooled) const {
  if (blocks.size() != static_cast<size_t>(world_size_))
    ThrowInvalid("assembling ", blocks.size(), " pooled blocks; expected ", world_size_);
  for (int32_t r = 0; r < world_size_; ++r) {
    CheckBlock(blocks[r], ("pooled block from rank " + std::to_string(r)).c_str(), b,
               owned_width_[r]);
  }
  CheckBlock(local, "the replicated tables' pooled block", b, local_width_);
  CheckBlock(fetched, "the fetched tables' pooled block", b, fetched_width_);
  for (int32_t r = 0; r < world_size_; ++r)
    Scatter(owned_slices_[r], b, blocks[r].data(), owned_width_[r], pooled, pooled_width_);
  Scatter(local_slices_, b, local.data(), local_width_, pooled, pooled_width_);
  Scatter(fetched_slices_, b, fetched.data(), fetched_width_, pooled, pooled_width_);
}

std::vector<std::vector<float>> PooledLayout::Split(const float* d_pooled, int64_t b,
                                                    std::vector<float>* local) const {
  std::vector<std::vector<float>> blocks(world_size_);
  for (int32_t r = 0; r < world_size_; ++r) {
    blocks[r].resize(static_cast<size_t>(b) * owned_width_[r]);
    Gather(owned_slices_[r], b, d_pooled, pooled_width_, blocks[r].data(), owned_width_[r]);
  }
  local->resize(static_cast<size_t>(b) * local_width_);
  Gather(local_slices_, b, d_pooled, pooled_width_, local->data(), local_width_);
  return blocks;
}

}  // namespace dlrm::shard

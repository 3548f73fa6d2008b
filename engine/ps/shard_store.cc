#include "engine/ps/shard_store.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

#include "engine/config/config.h"
#include "engine/core/status.h"
#include "engine/data/batch.h"
#include "engine/shard/planner.h"

namespace dlrm::ps {
namespace {

int32_t TableOfFeature(const config::ModelConfig& model, int32_t feature) {
  const std::string& name = model.sparse_features(feature).table();
  for (int t = 0; t < model.tables_size(); ++t) {
    if (model.tables(t).name() == name) return t;
  }
  ThrowInvalid("sparse feature ", feature, " names unknown table '", name, "'");
}

void CheckFinite(const std::vector<float>& values, int32_t feature, const char* what) {
  for (size_t i = 0; i < values.size(); ++i) {
    if (!std::isfinite(values[i]))
      ThrowInvalid("update of feature ", feature, ": ", what, "[", i, "] is not finite");
  }
}

}  // namespace

// The local batch: one sparse feature per binding (a feature once per shard of its table),
// feature-major as every batch, and the bindings' gradient columns side by side.
struct EmbeddingShardStore::LocalBatch {
  std::vector<int32_t> lengths;
  std::vector<int64_t> ids;
  std::vector<float> weights;
  std::vector<float> d_pooled;  // [batch_size x the bags' pooled width]
  ValidatedBatch batch;         // views the vectors above
};

namespace {

// kInvalidArgument naming the table unless its pieces are pairwise disjoint and cover all
// its rows x columns (a table the plan has no piece of is not checked here). A
// sum of overlap areas alone passed two overlapping pieces beside a gap of the same size
// (a review's finding, 2026-11-28: a forged MANIFEST's plan would have restored the gap as
// zeros).
void CheckTiles(const config::TableConfig& table, const std::vector<ShardLocation>& pieces) {
  if (pieces.empty()) return;
  int64_t area = 0;
  for (size_t i = 0; i < pieces.size(); ++i) {
    const ShardLocation& a = pieces[i];
    area += (a.row_end - a.row_begin) * (a.col_end - a.col_begin);
    for (size_t j = 0; j < i; ++j) {
      const ShardLocation& b = pieces[j];
      if (a.overlaps(b))
        ThrowInvalid("sharding plan: shards of table '", table.name(), "' overlap: rows [",
                     b.row_begin, ", ", b.row_end, ") x columns [", b.col_begin, ", ", b.col_end,
                     ") and rows [", a.row_begin, ", ", a.row_end, ") x columns [", a.col_begin,
                     ", ", a.col_end, ")");
    }
  }
  if (area != table.num_rows() * table.dim())
    ThrowInvalid("sharding plan: the shards of table '", table.name(), "' cover ", area, " of its ",
                 table.num_rows(), " x ", table.dim(), " values");
}

}  // namespace

std::vector<std::vector<ShardLocation>> LocateShards(const config::ModelConfig& model,
                                                     const shard::ShardingPlan& plan) {
  std::vector<std::vector<ShardLocation>> by_table(model.tables_size());
  std::vector<int32_t> next_index;  // per server; replicas counted in replica_next
  int32_t replica_next = 0;
  for (const shard::TableShard& s : plan.shards()) {
    const int32_t t = s.table_index();
    if (t < 0 || t >= model.tables_size() || model.tables(t).name() != s.table())
      ThrowInvalid("sharding plan names table '", s.table(), "' at index ", t,
                   ", which the config does not have");
    const config::TableConfig& tc = model.tables(t);
    ShardLocation loc;
    loc.table = t;
    if (s.type() == config::ShardingConfig::DATA_PARALLEL) {
      loc.owner = kTrainerReplica;
      loc.index = replica_next++;
      loc.row_end = tc.num_rows();
      loc.col_end = tc.dim();
    } else {
      if (!s.has_server() || s.server() < 0 || s.server() >= plan.num_servers())
        ThrowInvalid("sharding plan: a shard of table '", tc.name(), "' has server ", s.server(),
                     " outside [0, ", plan.num_servers(), ")");
      loc.owner = s.server();
      if (static_cast<size_t>(loc.owner) >= next_index.size()) next_index.resize(loc.owner + 1);
      loc.index = next_index[loc.owner]++;
      loc.row_begin = s.row_begin();
      loc.row_end = s.has_row_end() ? s.row_end() : tc.num_rows();
      loc.col_begin = s.col_begin();
      loc.col_end = s.has_col_end() ? s.col_end() : tc.dim();
    }
    if (loc.row_begin < 0 || loc.row_begin >= loc.row_end || loc.row_end > tc.num_rows() ||
        loc.col_begin < 0 || loc.col_begin >= loc.col_end || loc.col_end > tc.dim())
      ThrowInvalid("sharding plan: shard of table '", tc.name(), "' rows [", loc.row_begin, ", ",
                   loc.row_end, ") columns [", loc.col_begin, ", ", loc.col_end,
                   ") does not fit the table's ", tc.num_rows(), " x ", tc.dim());
    by_table[t].push_back(loc);
  }
  for (size_t t = 0; t < by_table.size(); ++t)
    CheckTiles(model.tables(static_cast<int>(t)), by_table[t]);
  return by_table;
}

EmbeddingShardStore::EmbeddingShardStore(const config::DlrmConfig& config,
                                         const shard::ShardingPlan& plan, int32_t owner,
                                         ThreadPool* pool, ShardRoles roles)
    : model_(config.model()), pool_(pool) {
  RequireFixedTables(model_, "distributed training (embedding shards)");
  std::vector<ShardLocation> mine;
  for (const auto& pieces : LocateShards(model_, plan)) {
    for (const ShardLocation& loc : pieces) {
      if (loc.owner == owner) mine.push_back(loc);
    }
  }
  // In the owner's numbering (plan order), which LocateShards assigned.
  shards_.resize(mine.size());
  for (const ShardLocation& loc : mine) shards_[loc.index] = loc;
  for (const ShardLocation& shard : shards_)
    shard::CheckShardColumns(config.sparse_optimizer(), model_.tables(shard.table), shard.col_begin,
                             shard.col_end);

  tables_ = BuildTables<float>(static_cast<int64_t>(shards_.size()), pool_, [&](int64_t i) {
    const Shard& s = shards_[i];
    const config::TableConfig& tc = model_.tables(s.table);
    EmbeddingTable<float> table(tc.name(), s.row_end - s.row_begin, s.col_end - s.col_begin,
                                tc.precision(), tc.rounding());
    table.InitializeShard(tc.initializer(), config.seed(), s.table, tc.num_rows(), s.row_begin,
                          s.col_begin);
    return table;
  });
  std::vector<TableShape> shapes;
  for (const EmbeddingTable<float>& table : tables_)
    shapes.push_back({table.num_rows(), table.dim()});
  for (const Shard& s : shards_) row_ranges_.push_back({s.row_begin, s.row_end});

  const bool all = roles == ShardRoles::kAll;
  served_ = Bind([&](const Shard& shard) { return all || !shard.whole_rows(model_); });
  pooled_ = Bind([&](const Shard& shard) { return all || shard.whole_rows(model_); });
  optimizer_ = MakeSparseOptimizer<float>(config.sparse_optimizer(), shapes);
}

EmbeddingShardStore::~EmbeddingShardStore() = default;

template <typename Takes>
EmbeddingShardStore::BagSet EmbeddingShardStore::Bind(const Takes& takes) {
  BagSet set;
  std::vector<FeatureBinding> bindings;
  int32_t width = 0;
  for (int32_t f = 0; f < model_.sparse_features_size(); ++f) {
    const int32_t t = TableOfFeature(model_, f);
    bool used = false;
    for (size_t i = 0; i < shards_.size(); ++i) {
      if (shards_[i].table != t || !takes(shards_[i])) continue;
      if (!used) set.features.push_back(f);
      used = true;
      FeatureBinding b;
      b.table = static_cast<int32_t>(i);
      b.offset = width;
      b.mean = model_.sparse_features(f).pooling() == config::SparseFeatureConfig::MEAN;
      bindings.push_back(b);
      set.bindings.push_back(
          {static_cast<int32_t>(set.features.size()) - 1, static_cast<int32_t>(i)});
      width += tables_[i].dim();
    }
  }
  set.bags = std::make_unique<EmbeddingBagCollection<float>>(&tables_, bindings, width);
  return set;
}

void EmbeddingShardStore::Lookup(int32_t shard, const int64_t* ids, int64_t n, float* out) const {
  if (shard < 0 || shard >= static_cast<int32_t>(shards_.size()))
    ThrowInvalid("lookup: shard ", shard, " is not one of this owner's ", shards_.size());
  if (n < 0 || (n > 0 && (ids == nullptr || out == nullptr)))
    ThrowInvalid("lookup: ", n, " ids with a null ids or out pointer");
  const Shard& s = shards_[shard];
  for (int64_t i = 0; i < n; ++i) {
    if (ids[i] < s.row_begin || ids[i] >= s.row_end)
      Throw(StatusCode::kOutOfRange, "lookup: ids[", i, "] = ", ids[i], " is outside shard ", shard,
            "'s rows [", s.row_begin, ", ", s.row_end, ") of table '",
            model_.tables(s.table).name(), "'");
  }
  const EmbeddingTable<float>& table = tables_[shard];
  for (int64_t i = 0; i < n; ++i) table.ReadRow(ids[i] - s.row_begin, out + i * table.dim());
}

// One feature's update checked against this owner's model: sizes, lengths, id ranges,
// weights (present iff `weighted`) and finite values. kInvalidArgument / kOutOfRange.
void EmbeddingShardStore::CheckFeatureUpdate(const FeatureUpdate& u, int64_t batch_size) const {
  const int32_t f = u.feature;
  const config::TableConfig& tc = model_.tables(TableOfFeature(model_, f));
  if (static_cast<int64_t>(u.lengths.size()) != batch_size)
    ThrowInvalid("update of feature ", f, ": ", u.lengths.size(), " lengths for ", batch_size,
                 " samples");
  int64_t total = 0;
  for (size_t b = 0; b < u.lengths.size(); ++b) {
    if (u.lengths[b] < 0)
      ThrowInvalid("update of feature ", f, ": lengths[", b, "] = ", u.lengths[b], " < 0");
    total += u.lengths[b];
  }
  if (total != static_cast<int64_t>(u.ids.size()))
    ThrowInvalid("update of feature ", f, ": lengths sum to ", total, " but there are ",
                 u.ids.size(), " ids");
  for (size_t i = 0; i < u.ids.size(); ++i) {
    if (u.ids[i] < 0 || u.ids[i] >= tc.num_rows())
      Throw(StatusCode::kOutOfRange, "update of feature ", f, ": ids[", i, "] = ", u.ids[i],
            " is outside table '", tc.name(), "' [0, ", tc.num_rows(), ")");
  }
  if (!u.weights.empty() && u.weights.size() != u.ids.size())
    ThrowInvalid("update of feature ", f, ": ", u.weights.size(), " weights for ", u.ids.size(),
                 " ids");
  if (static_cast<int64_t>(u.d_pooled.size()) != batch_size * tc.dim())
    ThrowInvalid("update of feature ", f, ": d_pooled has ", u.d_pooled.size(),
                 " values, expected ", batch_size, " x ", tc.dim());
  CheckFinite(u.weights, f, "weights");
  CheckFinite(u.d_pooled, f, "d_pooled");
}

void EmbeddingShardStore::BuildLocalBatch(const std::vector<FeatureUpdate>& updates,
                                          int64_t batch_size, bool weighted,
                                          LocalBatch* local) const {
  const int32_t width = served_.bags->pooled_width();
  local->d_pooled.assign(static_cast<size_t>(batch_size) * width, 0.0f);
  int32_t offset = 0;
  for (const Binding& b : served_.bindings) {
    const FeatureUpdate& u = updates[b.feature_slot];
    local->lengths.insert(local->lengths.end(), u.lengths.begin(), u.lengths.end());
    local->ids.insert(local->ids.end(), u.ids.begin(), u.ids.end());
    // A feature without per-id weights in a weighted batch: weights of 1, the same sums.
    if (!u.weights.empty())
      local->weights.insert(local->weights.end(), u.weights.begin(), u.weights.end());
    else if (weighted)
      local->weights.insert(local->weights.end(), u.ids.size(), 1.0f);
    const Shard& s = shards_[b.shard];
    const int32_t full_dim = model_.tables(s.table).dim();
    const int32_t cols = s.col_end - s.col_begin;
    for (int64_t r = 0; r < batch_size; ++r) {
      const float* src = u.d_pooled.data() + r * full_dim + s.col_begin;
      std::copy(src, src + cols, local->d_pooled.data() + r * width + offset);
    }
    offset += cols;
  }
  ValidatedBatch& batch = local->batch;
  batch.view.batch_size = batch_size;
  batch.view.num_sparse = static_cast<int32_t>(served_.bindings.size());
  batch.view.lengths = local->lengths.data();
  batch.view.num_ids = static_cast<int64_t>(local->ids.size());
  batch.view.ids = local->ids.data();
  batch.view.weights = weighted ? local->weights.data() : nullptr;
  batch.offsets.assign(local->lengths.size() + 1, 0);
  for (size_t i = 0; i < local->lengths.size(); ++i)
    batch.offsets[i + 1] = batch.offsets[i] + local->lengths[i];
}

void EmbeddingShardStore::ApplyUpdate(const std::vector<FeatureUpdate>& updates, int64_t batch_size,
                                      float lr, int64_t step) {
  // Every row's update checked before any is written: a refused update changes nothing.
  if (!CheckUpdate(updates, batch_size, lr, step))
    Throw(StatusCode::kFailedPrecondition, "update of step ", step,
          ": it would make a row or its optimizer state non-finite (learning rate ", lr,
          "); no row was updated");
  ApplyCheckedUpdate(lr, step);
}

bool EmbeddingShardStore::CheckUpdate(const std::vector<FeatureUpdate>& updates, int64_t batch_size,
                                      float lr, int64_t step) {
  checked_.reset();
  const std::vector<int32_t>& features = served_.features;
  if (batch_size <= 0) ThrowInvalid("update: batch_size must be > 0, got ", batch_size);
  if (updates.size() != features.size())
    ThrowInvalid("update: ", updates.size(), " feature updates for the ", features.size(),
                 " features this owner serves");
  const bool weighted = std::any_of(updates.begin(), updates.end(),
                                    [](const FeatureUpdate& u) { return !u.weights.empty(); });
  for (size_t k = 0; k < updates.size(); ++k) {
    if (updates[k].feature != features[k])
      ThrowInvalid("update ", k, " is for feature ", updates[k].feature, ", expected feature ",
                   features[k]);
    CheckFeatureUpdate(updates[k], batch_size);
  }
  auto local = std::make_unique<LocalBatch>();
  BuildLocalBatch(updates, batch_size, weighted, local.get());
  const bool finite = served_.bags->UpdateIsFinite(local->batch, local->d_pooled.data(),
                                                   *optimizer_, lr, step, pool_, &row_ranges_);
  if (finite) checked_ = std::move(local);
  return finite;
}

void EmbeddingShardStore::ApplyCheckedUpdate(float lr, int64_t step) {
  DLRM_INTERNAL_CHECK(checked_ != nullptr);
  served_.bags->ApplyUpdate(checked_->d_pooled.data(), *optimizer_, lr, step, pool_);
  checked_.reset();
}

void EmbeddingShardStore::RequireWholeRows(const char* what) const {
  for (const Binding& b : pooled_.bindings) {
    const Shard& s = shards_[b.shard];
    const config::TableConfig& tc = model_.tables(s.table);
    if (!s.whole_rows(model_))
      ThrowInvalid(what, ": table '", tc.name(), "' has a shard of rows [", s.row_begin, ", ",
                   s.row_end, ") of ", tc.num_rows(), "; this needs whole rows");
  }
}

ValidatedBatch EmbeddingShardStore::ValidateLocalBatch(const BatchView& batch) const {
  RequireWholeRows("a local batch");
  std::vector<SparseFeatureSpec> specs;
  for (const Binding& b : pooled_.bindings) specs.push_back({b.shard, tables_[b.shard].num_rows()});
  return ValidateBatch(batch, 0, specs, /*require_labels=*/false, pool_);
}

void EmbeddingShardStore::Pool(const ValidatedBatch& batch, float* out) const {
  DLRM_INTERNAL_CHECK(batch.view.num_sparse == static_cast<int32_t>(pooled_.bindings.size()));
  if (pooled_.bindings.empty()) return;
  pooled_.bags->ForwardBatch(batch, out, pool_);
}

bool EmbeddingShardStore::PooledUpdateIsFinite(const ValidatedBatch& batch, const float* d_pooled,
                                               float lr, int64_t step) {
  DLRM_INTERNAL_CHECK(batch.view.num_sparse == static_cast<int32_t>(pooled_.bindings.size()));
  if (pooled_.bindings.empty()) return true;
  return pooled_.bags->UpdateIsFinite(batch, d_pooled, *optimizer_, lr, step, pool_, &row_ranges_);
}

void EmbeddingShardStore::ApplyPooledUpdate(const float* d_pooled, float lr, int64_t step) {
  if (pooled_.bindings.empty()) return;
  pooled_.bags->ApplyUpdate(d_pooled, *optimizer_, lr, step, pool_);
}

}  // namespace dlrm::ps

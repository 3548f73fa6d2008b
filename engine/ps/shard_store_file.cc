#include "engine/ps/shard_store_file.h"

#include <algorithm>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <vector>

#include "engine/checkpoint/checkpoint_file.h"
#include "engine/checkpoint/codec.h"
#include "engine/checkpoint/sharded_checkpoint.h"
#include "engine/core/status.h"

namespace dlrm::ps {
namespace {

using namespace dlrm::checkpoint;  // the codec: names, formats, metadata

std::string OwnerText(int32_t owner) {
  return owner == kTrainerReplica ? "the trainers' replicas" : "server " + std::to_string(owner);
}

// Names a shard by what it holds, so that a tensor name alone says where it belongs.
std::string ShardKey(const std::string& table, const ShardLocation& s) {
  std::ostringstream os;
  os << table << ".rows_" << s.row_begin << "_" << s.row_end << ".cols_" << s.col_begin << "_"
     << s.col_end;
  return os.str();
}

std::string ShardKey(const EmbeddingShardStore& store, int32_t i) {
  return ShardKey(store.shard_table(i).name(), store.shards()[i]);
}

// Every shard's table, rows, columns and (other than FP32) its rows' precision, and the
// optimizer's state names (its kind: none for SGD, sum_sq, row_sum_sq, exp_avg +
// exp_avg_sq).
Layout ShardLayout(const EmbeddingShardStore& store, SparseOptimizer<float>& optimizer) {
  const auto n = static_cast<int32_t>(store.shards().size());
  Layout layout{{"num_shards", std::to_string(n)}};
  for (int32_t i = 0; i < n; ++i) {
    const ShardLocation& s = store.shards()[i];
    const EmbeddingTable<float>& table = store.shard_table(i);
    std::ostringstream os;
    os << "table " << table.name() << " rows [" << s.row_begin << ", " << s.row_end << ") columns ["
       << s.col_begin << ", " << s.col_end << ")";
    if (table.half()) os << " " << PrecisionName(table.precision());
    layout.emplace_back("shard." + std::to_string(i), os.str());
  }
  // Every shard has the same state names; an empty store has no optimizer to describe.
  layout.emplace_back("optimizer_state", n > 0 ? StateNames(optimizer.StateBuffers(0)) : "-");
  return layout;
}

// An empty table of shard i's shape and precision, for a load to fill before it commits
// (EmbeddingTable::SwapRows).
EmbeddingTable<float> StagingTable(const EmbeddingShardStore& store, int32_t i) {
  const EmbeddingTable<float>& live = store.shard_table(i);
  return EmbeddingTable<float>(live.name(), live.num_rows(), live.dim(), live.precision(),
                               live.rounding().mode);
}

void CheckStoreOwner(const EmbeddingShardStore& store, int32_t owner) {
  for (const ShardLocation& s : store.shards()) {
    if (s.owner != owner)
      ThrowInvalid("the shard store holds shards of ", OwnerText(s.owner), ", not of ",
                   OwnerText(owner));
  }
}

}  // namespace

void SaveShardStore(const EmbeddingShardStore& store, int32_t owner, int64_t step,
                    const std::string& path) {
  CheckpointWriter writer;
  WriteStep(step, &writer);
  CheckStoreOwner(store, owner);
  // StateBuffers() is not const because it hands out pointers for restoring; here they are
  // only read.
  SparseOptimizer<float>& optimizer = const_cast<EmbeddingShardStore&>(store).optimizer();
  writer.SetMetadata("format", kShardStoreFormat);
  writer.SetMetadata("owner", std::to_string(owner));
  WriteLayout(ShardLayout(store, optimizer), &writer);
  for (int32_t i = 0; i < static_cast<int32_t>(store.shards().size()); ++i)
    AddEmbedding(ShardKey(store, i), store.shard_table(i), optimizer.StateBuffers(i), &writer);
  writer.WriteAtomic(path);
}

int64_t LoadShardStore(EmbeddingShardStore* store, int32_t owner, const std::string& path) {
  if (store == nullptr) ThrowInvalid("LoadShardStore: store is null");
  CheckStoreOwner(*store, owner);
  const CheckpointReader reader(path);
  CheckFormat(reader, path, kShardStoreFormat);
  const std::string& saved_owner = RequiredMetadata(reader, path, "owner");
  if (saved_owner != std::to_string(owner))
    Throw(StatusCode::kFailedPrecondition, "checkpoint ", path, " holds the shards of owner ",
          saved_owner, ", not of ", OwnerText(owner));
  const int64_t step = ReadStep(reader, path);
  SparseOptimizer<float>& optimizer = store->optimizer();
  CheckLayout(reader, path, ShardLayout(*store, optimizer), "shard store");

  // Stage everything; the store changes only once every tensor was read.
  const auto n = static_cast<int32_t>(store->shards().size());
  std::vector<EmbeddingTable<float>> rows;
  std::vector<StagedState> state;
  rows.reserve(n);
  state.reserve(n);
  std::set<std::string> expected;
  for (int32_t i = 0; i < n; ++i) {
    EmbeddingTable<float>& staged_rows = rows.emplace_back(StagingTable(*store, i));
    const StagedState& staged = state.emplace_back(optimizer.StateBuffers(i));
    ReadEmbedding(reader, ShardKey(*store, i), &staged_rows, staged.list(), &expected);
  }
  CheckNoOtherTensors(reader, path, expected, "shard store");
  for (int32_t i = 0; i < n; ++i) {
    store->mutable_shard_table(i).SwapRows(&rows[i]);
    state[i].Commit();
  }
  return step;
}

namespace {

// The saved checkpoint's files, each read and checked once: its format, owner and step.
class SavedFiles {
 public:
  SavedFiles(std::string dir, int64_t step) : dir_(std::move(dir)), step_(step) {}

  const CheckpointReader& Of(int32_t owner) {
    const std::string name = owner == kTrainerReplica ? kReplicaShardFile : ServerShardFile(owner);
    auto& reader = readers_[name];
    if (reader) return *reader;
    const std::string path = dir_ + "/" + name;
    reader = std::make_unique<CheckpointReader>(path);
    CheckFormat(*reader, path, kShardStoreFormat);
    if (RequiredMetadata(*reader, path, "owner") != std::to_string(owner))
      Throw(StatusCode::kDataLoss, "checkpoint ", path, " does not hold the shards of ",
            OwnerText(owner));
    if (ReadStep(*reader, path) != step_)
      Throw(StatusCode::kDataLoss, "checkpoint ", path, " is of step ", ReadStep(*reader, path),
            ", the manifest says ", step_);
    return *reader;
  }

 private:
  std::string dir_;
  int64_t step_;
  std::map<std::string, std::unique_ptr<CheckpointReader>> readers_;
};

// Copies the overlap of saved piece `from` (values[rows x from_width]) into shard `to`
// (out[rows x to_width]): per element (the widths are the pieces' columns), or per row
// (widths 1: a row-wise state, only ever on whole rows: CheckShardColumns). Which is
// said, not guessed from a width: a shard of one column is per element too.
template <typename E>
void CopyOverlap(const ShardLocation& from, const E* values, int64_t from_width,
                 const ShardLocation& to, E* out, int64_t to_width, bool per_row) {
  const int64_t r0 = std::max(from.row_begin, to.row_begin);
  const int64_t r1 = std::min(from.row_end, to.row_end);
  const int64_t c0 = per_row ? 0 : std::max(from.col_begin, to.col_begin);
  const int64_t c1 = per_row ? 1 : std::min(from.col_end, to.col_end);
  const int64_t from_col = per_row ? 0 : from.col_begin;
  const int64_t to_col = per_row ? 0 : to.col_begin;
  for (int64_t r = r0; r < r1; ++r)
    std::copy(values + (r - from.row_begin) * from_width + (c0 - from_col),
              values + (r - from.row_begin) * from_width + (c1 - from_col),
              out + (r - to.row_begin) * to_width + (c0 - to_col));
}

// Saved piece `piece`'s tensor `name` (piece rows x width values of E, stored as dtype in
// `shape`) read into values, and its overlap with shard `to` copied into out (to_width a
// row; per_row as CopyOverlap's).
template <typename E>
void CopyPiece(const CheckpointReader& reader, const std::string& name, TensorEntry::DType dtype,
               const std::vector<int64_t>& shape, const ShardLocation& piece, int64_t width,
               const ShardLocation& to, E* out, int64_t to_width, bool per_row,
               std::vector<E>* values) {
  values->resize(static_cast<size_t>((piece.row_end - piece.row_begin) * width));
  reader.ReadTensor(name, dtype, shape, values->data());
  CopyOverlap(piece, values->data(), width, to, out, to_width, per_row);
}

// Shard i of store assembled from the saved pieces into the staged rows and state.
void CutShard(const EmbeddingShardStore& store, int32_t i, const std::vector<ShardLocation>& saved,
              SavedFiles* files, EmbeddingTable<float>* rows_out, const StateBufferList& state) {
  const ShardLocation& shard = store.shards()[static_cast<size_t>(i)];
  const std::string& table = store.shard_table(i).name();
  const int64_t rows = shard.row_end - shard.row_begin, cols = shard.col_end - shard.col_begin;
  int64_t covered = 0;
  std::vector<float> values;
  std::vector<uint16_t> halves;  // a BF16 / FP16 table's piece
  for (const ShardLocation& piece : saved) {
    if (!piece.overlaps(shard)) continue;
    const CheckpointReader& reader = files->Of(piece.owner);
    const std::string key = ShardKey(table, piece), weight = EmbeddingWeightName(key);
    const int64_t piece_rows = piece.row_end - piece.row_begin;
    const int64_t piece_cols = piece.col_end - piece.col_begin;
    if (rows_out->half())
      CopyPiece(reader, weight, RowsDType(*rows_out), {piece_rows, piece_cols}, piece, piece_cols,
                shard, rows_out->halves().data(), cols, false, &halves);
    else
      CopyPiece(reader, weight, kF32, {piece_rows, piece_cols}, piece, piece_cols, shard,
                rows_out->data().data(), cols, false, &values);
    for (const auto& [name, buffer] : state) {
      const bool per_row = IsPerRowState(name);
      const int64_t width = per_row ? 1 : cols, piece_width = per_row ? 1 : piece_cols;
      CopyPiece(reader, SparseStateName(key, name), kF32, {piece_rows * piece_width}, piece,
                piece_width, shard, buffer->data(), width, per_row, &values);
    }
    covered +=
        (std::min(piece.row_end, shard.row_end) - std::max(piece.row_begin, shard.row_begin)) *
        (std::min(piece.col_end, shard.col_end) - std::max(piece.col_begin, shard.col_begin));
  }
  if (covered != rows * cols)
    Throw(StatusCode::kDataLoss, "the saved shards of table ", table, " cover ", covered,
          " of the ", rows * cols, " values of rows [", shard.row_begin, ", ", shard.row_end,
          ") columns [", shard.col_begin, ", ", shard.col_end, ")");
}

}  // namespace

int64_t LoadReshardedStore(EmbeddingShardStore* store, const std::string& dir,
                           const checkpoint::CheckpointManifest& manifest,
                           const config::ModelConfig& model) {
  if (store == nullptr) ThrowInvalid("LoadReshardedStore: store is null");
  const std::vector<std::vector<ShardLocation>> saved = LocateShards(model, manifest.plan());
  SavedFiles files(dir, manifest.step());
  SparseOptimizer<float>& optimizer = store->optimizer();
  const auto n = static_cast<int32_t>(store->shards().size());
  std::vector<EmbeddingTable<float>> rows;
  std::vector<StagedState> state;
  rows.reserve(static_cast<size_t>(n));
  state.reserve(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) {
    EmbeddingTable<float>& staged_rows = rows.emplace_back(StagingTable(*store, i));
    const StagedState& staged = state.emplace_back(optimizer.StateBuffers(i));
    CutShard(*store, i, saved[static_cast<size_t>(store->shards()[i].table)], &files, &staged_rows,
             staged.list());
  }
  for (int32_t i = 0; i < n; ++i) {
    store->mutable_shard_table(i).SwapRows(&rows[i]);
    state[i].Commit();
  }
  return manifest.step();
}

namespace {

// One server holding every table as one TABLE_WISE shard, in table order.
shard::ShardingPlan WholeTablePlan(const config::ModelConfig& model) {
  shard::ShardingPlan plan;
  plan.set_num_servers(1);
  for (int32_t t = 0; t < model.tables_size(); ++t) {
    shard::TableShard* s = plan.add_shards();
    s->set_table(model.tables(t).name());
    s->set_table_index(t);
    s->set_type(config::ShardingConfig::TABLE_WISE);
    s->set_server(0);
    s->set_row_begin(0);
    s->set_row_end(model.tables(t).num_rows());
    s->set_col_begin(0);
    s->set_col_end(model.tables(t).dim());
  }
  shard::ServerTotals* totals = plan.add_servers();
  totals->set_server(0);
  totals->set_num_shards(model.tables_size());
  return plan;
}

}  // namespace

int64_t LoadWholeTables(const std::string& dir, const checkpoint::CheckpointManifest& manifest,
                        const config::DlrmConfig& config,
                        std::vector<EmbeddingTable<float>>* tables,
                        SparseOptimizer<float>* optimizer) {
  if (tables == nullptr || optimizer == nullptr) ThrowInvalid("LoadWholeTables: null output");
  DLRM_INTERNAL_CHECK(static_cast<int32_t>(tables->size()) == config.model().tables_size());
  EmbeddingShardStore store(config, WholeTablePlan(config.model()), /*owner=*/0);
  const int64_t step = LoadReshardedStore(&store, dir, manifest, config.model());
  // Nothing can fail from here: the loaded rows change places with the caller's.
  for (int32_t t = 0; t < config.model().tables_size(); ++t) {
    DLRM_INTERNAL_CHECK(store.shards()[static_cast<size_t>(t)].table == t);
    (*tables)[static_cast<size_t>(t)].SwapRows(&store.mutable_shard_table(t));
    const auto mine = optimizer->StateBuffers(t);
    const auto loaded = store.optimizer().StateBuffers(t);
    DLRM_INTERNAL_CHECK(mine.size() == loaded.size());
    for (size_t k = 0; k < mine.size(); ++k) {
      DLRM_INTERNAL_CHECK(mine[k].first == loaded[k].first &&
                          mine[k].second->size() == loaded[k].second->size());
      mine[k].second->swap(*loaded[k].second);
    }
  }
  return step;
}

}  // namespace dlrm::ps

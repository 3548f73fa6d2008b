#include "engine/ps/shard_store_file.h"

#include <algorithm>
#include <set>
#include <sstream>
#include <vector>

#include "engine/checkpoint/checkpoint_file.h"
#include "engine/checkpoint/codec.h"
#include "engine/core/status.h"

namespace dlrm::ps {
namespace {

using namespace dlrm::checkpoint;  // the codec: names, formats, metadata

std::string OwnerText(int32_t owner) {
  return owner == kTrainerReplica ? "the trainers' replicas" : "server " + std::to_string(owner);
}

// Names a shard by what it holds, so that a tensor name alone says where it belongs.
std::string ShardKey(const EmbeddingShardStore& store, int32_t i) {
  const ShardLocation& s = store.shards()[i];
  std::ostringstream os;
  os << store.shard_table(i).name() << ".rows_" << s.row_begin << "_" << s.row_end << ".cols_"
     << s.col_begin << "_" << s.col_end;
  return os.str();
}

// Every shard's table, rows and columns, and the optimizer's state names (its kind: none
// for SGD, sum_sq, row_sum_sq, exp_avg + exp_avg_sq).
Layout ShardLayout(const EmbeddingShardStore& store, SparseOptimizer<float>& optimizer) {
  const auto n = static_cast<int32_t>(store.shards().size());
  Layout layout{{"num_shards", std::to_string(n)}};
  for (int32_t i = 0; i < n; ++i) {
    const ShardLocation& s = store.shards()[i];
    std::ostringstream os;
    os << "table " << store.shard_table(i).name() << " rows [" << s.row_begin << ", " << s.row_end
       << ") columns [" << s.col_begin << ", " << s.col_end << ")";
    layout.emplace_back("shard." + std::to_string(i), os.str());
  }
  // Every shard has the same state names; an empty store has no optimizer to describe.
  layout.emplace_back("optimizer_state", n > 0 ? StateNames(optimizer.StateBuffers(0)) : "-");
  return layout;
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
  std::vector<std::vector<float>> weights(n);
  std::vector<StagedState> state;
  state.reserve(n);
  std::set<std::string> expected;
  for (int32_t i = 0; i < n; ++i) {
    const EmbeddingTable<float>& table = store->shard_table(i);
    weights[i].resize(table.data().size());
    const StagedState& staged = state.emplace_back(optimizer.StateBuffers(i));
    ReadEmbedding(reader, ShardKey(*store, i), table, weights[i].data(), staged.list(), &expected);
  }
  CheckNoOtherTensors(reader, path, expected, "shard store");

  // Copies, not swaps: the live buffers keep their allocation (and any page advice).
  for (int32_t i = 0; i < n; ++i) {
    std::vector<float>& live = store->mutable_shard_table(i).data();
    std::copy(weights[i].begin(), weights[i].end(), live.begin());
    state[i].Commit();
  }
  return step;
}

}  // namespace dlrm::ps

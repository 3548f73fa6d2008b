#include "engine/cuda/device_tables.h"

#include <algorithm>

#include "engine/core/status.h"
#include "engine/embedding/half_bits.h"
#include "engine/embedding/packed_row.h"

namespace dlrm::cuda {
namespace {

// The kernels' code for a table's rows: 0 FP32, 1 BF16, 2 FP16.
int32_t HalfKind(const EmbeddingTable<float>& table) {
  if (!table.half()) return 0;
  return table.precision() == config::TableConfig::BF16 ? 1 : 2;
}

// The kernels' code for a quantized table's rows: 8 (INT8), 4 (INT4), 0 (not quantized).
int32_t QuantBits(const EmbeddingTable<float>& table) {
  if (!table.quantized()) return 0;
  return table.precision() == config::TableConfig::INT8 ? 8 : 4;
}

// Whether table t's rows round by the table rows they hold (keys[t], RowKeys): 16-bit rows
// with stochastic rounding and keys given.
bool Keyed(const EmbeddingTable<float>& table, const RowKeys& keys, size_t t) {
  return t < keys.size() && keys[t] != nullptr && table.half() &&
         table.rounding().mode == config::TableConfig::STOCHASTIC;
}

// Table t's rows (of whichever precision), its optimizer state and its rounding keys, in
// bytes.
size_t DeviceBytes(const EmbeddingTable<float>& table, SparseOptimizer<float>& optimizer,
                   const RowKeys& keys, int32_t t) {
  size_t bytes = table.data().size() * sizeof(float) + table.halves().size() * sizeof(uint16_t) +
                 table.codes().size();
  if (Keyed(table, keys, static_cast<size_t>(t)))
    bytes += static_cast<size_t>(table.num_rows()) * sizeof(int64_t);
  for (const auto& [name, state] : optimizer.StateBuffers(t))
    bytes += state->size() * sizeof(float);
  return bytes;
}

}  // namespace

void DeviceTables::Check(const std::vector<EmbeddingTable<float>>& tables,
                         const std::vector<FeatureBinding>& features,
                         SparseOptimizer<float>& optimizer, const RowKeys& keys,
                         const DeviceInfo& device, size_t free_bytes) {
  const int32_t max_dim = EmbeddingBackward::MaxDim(device.shared_memory_per_block);
  const std::vector<char> held = BoundTables(features, tables.size());
  size_t total = 0, largest = 0;
  const EmbeddingTable<float>* largest_table = nullptr;
  for (size_t t = 0; t < tables.size(); ++t) {
    if (!held[t]) continue;
    const EmbeddingTable<float>& table = tables[t];
    if (table.dim() > max_dim)
      ThrowInvalid("table \"", table.name(), "\" has dim ", table.dim(), "; ", device.name,
                   " holds a row of at most ", max_dim, " floats in a block's shared memory");
    if (table.num_rows() > kMaxDeviceRows)
      ThrowInvalid("table \"", table.name(), "\" has ", table.num_rows(),
                   " rows; the CUDA backend holds tables of at most ", kMaxDeviceRows,
                   " rows (32-bit ids)");
    const size_t bytes = DeviceBytes(table, optimizer, keys, static_cast<int32_t>(t));
    total += bytes;
    if (largest_table == nullptr || bytes > largest) largest = bytes, largest_table = &table;
  }
  if (total > free_bytes)
    Throw(StatusCode::kResourceExhausted, "the embedding tables need ", total,
          " bytes of device memory (rows, optimizer state and rounding keys; the largest, table \"",
          largest_table->name(), "\", ", largest, " bytes) but ", device.name, " has ", free_bytes,
          " bytes free");
}

void DeviceTables::Push(const std::vector<EmbeddingTable<float>>& tables,
                        SparseOptimizer<float>& optimizer,
                        const std::vector<FeatureBinding>& features, const RowKeys& keys) {
  // Same tables and sizes every time: the arrays (and the descriptions naming them) stay put.
  held_ = BoundTables(features, tables.size());
  tables_.resize(tables.size());
  for (size_t t = 0; t < tables.size(); ++t) {
    if (!held_[t]) continue;
    Table& d = tables_[t];
    d.rows.Upload(tables[t].data(), stream_);
    d.halves.Upload(tables[t].halves(), stream_);
    d.codes.Upload(tables[t].codes(), stream_);
    const auto states = optimizer.StateBuffers(static_cast<int32_t>(t));
    d.states.resize(states.size());
    for (size_t s = 0; s < states.size(); ++s) d.states[s].Upload(*states[s].second, stream_);
    if (Keyed(tables[t], keys, t))
      d.keys.Upload(keys[t], static_cast<size_t>(tables[t].num_rows()), stream_);
  }
  Describe(tables, features);
  CheckCuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
}

void DeviceTables::Pull(std::vector<EmbeddingTable<float>>& tables,
                        SparseOptimizer<float>& optimizer) const {
  DLRM_INTERNAL_CHECK(tables.size() == tables_.size() && held_.size() == tables.size());
  for (size_t t = 0; t < tables.size(); ++t) {
    if (!held_[t]) continue;
    const Table& d = tables_[t];
    d.rows.Download(tables[t].data().data(), tables[t].data().size(), stream_);
    d.halves.Download(tables[t].halves().data(), tables[t].halves().size(), stream_);
    const auto states = optimizer.StateBuffers(static_cast<int32_t>(t));
    DLRM_INTERNAL_CHECK(states.size() == d.states.size());
    for (size_t s = 0; s < states.size(); ++s)
      d.states[s].Download(states[s].second->data(), states[s].second->size(), stream_);
  }
  CheckCuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
}

std::vector<RowMove> DeviceTables::RowArrays(size_t t, const EmbeddingTable<float>& table,
                                             const int64_t* rows, size_t n) {
  Table& d = tables_[t];
  std::vector<RowMove> moves(1);
  moves[0].array = table.half() ? d.halves.get() : reinterpret_cast<uint16_t*>(d.rows.get());
  moves[0].width = table.half() ? table.dim() : 2 * int64_t{table.dim()};
  int64_t offset = 2 * PackedWeightWidth(table.precision(), table.dim());  // words
  for (DeviceBuffer<float>& state : d.states) {
    RowMove m;
    m.array = reinterpret_cast<uint16_t*>(state.get());
    m.width = 2 * static_cast<int64_t>(state.size() / static_cast<size_t>(table.num_rows()));
    m.packed_offset = offset;
    offset += m.width;
    moves.push_back(m);
  }
  for (RowMove& m : moves) m.packed_stride = offset, m.rows = rows, m.n = static_cast<int64_t>(n);
  return moves;
}

void DeviceTables::ReplaceRows(const std::vector<ChangedRows>& changed,
                               const std::vector<EmbeddingTable<float>>& tables,
                               SparseOptimizer<float>& optimizer, const RowKeys& keys) {
  ForgetReplacedRows();
  std::vector<float> packed;
  std::vector<int64_t> incoming_keys;
  for (const ChangedRows& c : changed) {
    const auto t = static_cast<size_t>(c.table);
    if (t >= held_.size() || !held_[t] || c.rows->empty()) continue;
    PackRows(tables[t], optimizer.StateBuffers(c.table), *c.rows, &packed);
    Replaced& r = replaced_[t];
    r.rows.Reserve(c.rows->size());
    r.rows.CopyIn(c.rows->data(), c.rows->size(), stream_);
    r.kept.Reserve(packed.size() * 2);
    r.incoming.Reserve(packed.size() * 2);
    r.incoming.CopyIn(reinterpret_cast<const uint16_t*>(packed.data()), packed.size() * 2, stream_);
    for (const RowMove& m : RowArrays(t, tables[t], r.rows.get(), c.rows->size()))
      SwapIn(m, r.kept.get(), r.incoming.get(), &r.moves);
    if (Keyed(tables[t], keys, t)) ReplaceKeys(t, *c.rows, keys[t], &incoming_keys, &r);
    CheckCuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");  // host copies reused
  }
}

void DeviceTables::ReplaceKeys(size_t t, const std::vector<int64_t>& rows, const int64_t* keys,
                               std::vector<int64_t>* incoming, Replaced* r) {
  constexpr int64_t kWords = sizeof(int64_t) / sizeof(uint16_t);
  DLRM_INTERNAL_CHECK(tables_[t].keys.size() > 0);  // Push was given this table's keys
  incoming->resize(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) (*incoming)[i] = keys[rows[i]];
  r->kept_keys.Reserve(rows.size() * kWords);
  r->incoming_keys.Reserve(rows.size() * kWords);
  r->incoming_keys.CopyIn(reinterpret_cast<const uint16_t*>(incoming->data()), rows.size() * kWords,
                          stream_);
  RowMove m;
  m.array = reinterpret_cast<uint16_t*>(tables_[t].keys.get());
  m.width = m.packed_stride = kWords;
  m.rows = r->rows.get();
  m.n = static_cast<int64_t>(rows.size());
  SwapIn(m, r->kept_keys.get(), r->incoming_keys.get(), &r->moves);
}

void DeviceTables::SwapIn(RowMove move, uint16_t* kept, uint16_t* incoming,
                          std::vector<RowMove>* restore) {
  move.packed = kept;
  LaunchGatherRows(move, stream_);
  move.packed = incoming;
  LaunchScatterRows(move, stream_);
  move.packed = kept;  // what RestoreRows scatters
  restore->push_back(move);
}

void DeviceTables::PullRows(const ChangedRows& rows, std::vector<EmbeddingTable<float>>& tables,
                            SparseOptimizer<float>& optimizer) {
  const auto t = static_cast<size_t>(rows.table);
  if (t >= held_.size() || !held_[t] || rows.rows->empty()) return;
  EmbeddingTable<float>& table = tables[t];
  const StateBufferList state = optimizer.StateBuffers(rows.table);
  std::vector<float> packed(rows.rows->size() * static_cast<size_t>(PackedRowWidth(table, state)));
  pull_rows_.Reserve(rows.rows->size());
  pull_rows_.CopyIn(rows.rows->data(), rows.rows->size(), stream_);
  pulled_.Reserve(packed.size() * 2);
  for (RowMove m : RowArrays(t, table, pull_rows_.get(), rows.rows->size())) {
    m.packed = pulled_.get();
    LaunchGatherRows(m, stream_);
  }
  pulled_.Download(reinterpret_cast<uint16_t*>(packed.data()), packed.size() * 2, stream_);
  CheckCuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  UnpackRows(packed.data(), state, *rows.rows, &table);
}

void DeviceTables::ForgetReplacedRows() {
  replaced_.resize(tables_.size());
  for (Replaced& r : replaced_) r.moves.clear();
}

void DeviceTables::RestoreRows() {
  for (Replaced& r : replaced_) {
    for (const RowMove& m : r.moves) LaunchScatterRows(m, stream_);
    r.moves.clear();
  }
  CheckCuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
}

void DeviceTables::Describe(const std::vector<EmbeddingTable<float>>& tables,
                            const std::vector<FeatureBinding>& features) {
  std::vector<FeatureSpec> specs;
  std::vector<SparseFeatureArgs> sparse_features;
  for (const FeatureBinding& f : features) {
    const EmbeddingTable<float>& table = tables[f.table];
    const Table& d = tables_[f.table];
    specs.push_back({d.rows.get(), table.dim(), f.offset, f.mean ? 1 : 0, d.halves.get(),
                     HalfKind(table), d.codes.get(), QuantBits(table),
                     static_cast<int32_t>(table.row_bytes())});
    sparse_features.push_back({f.table, f.offset, f.mean ? 1 : 0});
  }
  std::vector<SparseTableArgs> sparse_tables;
  int64_t max_rows = 1;
  for (size_t t = 0; t < tables.size(); ++t) {
    if (!held_[t]) {  // no feature's key names it: no rows, no columns
      sparse_tables.push_back(SparseTableArgs{});
      continue;
    }
    const EmbeddingTable<float>& table = tables[t];
    const Table& d = tables_[t];
    const HalfRounding& r = table.rounding();
    sparse_tables.push_back({d.rows.get(), table.num_rows(), table.dim(),
                             d.states.size() > 0 ? d.states[0].get() : nullptr,
                             d.states.size() > 1 ? d.states[1].get() : nullptr, d.halves.get(),
                             HalfKind(table), r.mode == config::TableConfig::STOCHASTIC ? 1 : 0,
                             half_bits::RoundingKey(r.seed, r.table), r.row_begin, r.col_begin,
                             d.keys.get()});
    max_dim_ = std::max(max_dim_, table.dim());
    max_rows = std::max(max_rows, table.num_rows());
  }
  id_bits_ = EmbeddingBackward::IdBitsFor(max_rows);
  num_features_ = static_cast<int32_t>(features.size());
  num_tables_ = static_cast<int32_t>(tables.size());
  feature_specs_.Upload(specs, stream_);
  sparse_features_.Upload(sparse_features, stream_);
  sparse_tables_.Upload(sparse_tables, stream_);
}

void DeviceTables::Pool(const DeviceBatch& in, float* out, int32_t out_width) const {
  if (num_features_ == 0) return;
  LaunchPooledForward(in.PooledArgs(feature_specs_.get(), num_features_, out, out_width), stream_);
}

EmbeddingBackwardArgs DeviceTables::SparseArgs(const DeviceBatch& in, const float* d_pooled,
                                               int32_t pooled_width, const int32_t* skip) const {
  EmbeddingBackwardArgs a;
  a.features = sparse_features_.get();
  a.num_features = num_features_;
  a.tables = sparse_tables_.get();
  a.num_tables = num_tables_;
  a.max_dim = max_dim_;
  a.batch_size = in.shape.batch_size;
  a.offsets = in.offsets.get();
  a.ids = in.ids.get();
  a.id_bits = id_bits_;
  a.weights = in.shape.weights ? in.weights.get() : nullptr;
  a.num_ids = in.shape.num_ids;
  a.d_pooled = d_pooled;
  a.pooled_width = pooled_width;
  a.skip = skip;
  return a;
}

}  // namespace dlrm::cuda

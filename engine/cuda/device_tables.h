// A set of embedding tables and their sparse optimizer's state on the device, with the
// descriptions the kernels take: the pooled forward's FeatureSpec per feature
// (pooled_embedding.h) and the fused backward's SparseFeatureArgs and SparseTableArgs
// (embedding_backward.h). The single-process backend (backend.h) holds the model's tables
// here, a trainer that owns table shards (owned_shards.h) its shards.
//
// The host tables stay the copy checkpoints read and write: Push copies them (FP32 rows,
// BF16 / FP16 rows or quantized codes, the optimizer's state, and an SSD cache's rounding
// keys: RowKeys) in, Pull copies what training changed back. Only the tables a feature binds are
// held (BoundTables): a table no feature pools, such as the row-wise pieces a trainer's store
// serves to other ranks and trains on the host, is neither counted, copied in nor copied back over.
// The device arrays are sized by the first Push and never move, so the descriptions (and CUDA
// graphs naming them) stay valid.
//
// Memory: owns its device arrays; borrows the stream. Threading: one thread at a time, on
// the device selected by the caller. Errors: kInvalidArgument naming a table the kernels
// cannot hold (Check); kInternal naming a failing CUDA call.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "engine/cuda/batch_staging.h"
#include "engine/cuda/device.h"
#include "engine/cuda/device_buffer.h"
#include "engine/cuda/embedding_backward.h"
#include "engine/cuda/pooled_embedding.h"
#include "engine/cuda/row_moves.h"
#include "engine/embedding/embedding_bag.h"
#include "engine/embedding/embedding_table.h"
#include "engine/embedding/sparse_optimizer.h"
#include "engine/model/dynamic_tables.h"

namespace dlrm::cuda {

// Per model table, the table row each slot of an SSD table's cache holds (DynamicRows'
// ids_of_rows; null for other tables): a 16-bit cache slot with stochastic rounding draws
// the bits of the row it holds (EmbeddingTable::KeyRoundingBy), so the device keeps a
// copy of these keys beside such a table's rows. Empty: no table has any.
using RowKeys = std::vector<const int64_t*>;

class DeviceTables {
 public:
  explicit DeviceTables(cudaStream_t stream) : stream_(stream) {}
  DeviceTables(const DeviceTables&) = delete;
  DeviceTables& operator=(const DeviceTables&) = delete;

  // Before anything is copied, for the tables `features` bind: kInvalidArgument naming the
  // first one `device` cannot hold (a row wider than a block's shared memory holds for the
  // update, or more than kMaxDeviceRows rows); kResourceExhausted when their rows,
  // `optimizer`'s state and the rounding keys `keys` calls for (as Push's) need more than
  // `free_bytes` (the device's free memory), naming the bytes, the largest table and the
  // device.
  static void Check(const std::vector<EmbeddingTable<float>>& tables,
                    const std::vector<FeatureBinding>& features, SparseOptimizer<float>& optimizer,
                    const RowKeys& keys, const DeviceInfo& device, size_t free_bytes);

  // Copies the tables `features` (table indices into `tables`) bind, `optimizer`'s state
  // for them and their rounding keys in (the same tables, features and kinds of keys every
  // call), then describes them for the kernels. Returns once the copies are done.
  void Push(const std::vector<EmbeddingTable<float>>& tables, SparseOptimizer<float>& optimizer,
            const std::vector<FeatureBinding>& features, const RowKeys& keys);
  // Copies the rows and state training changed back into `tables` and `optimizer` (those
  // Push was given), the held tables only. Quantized codes are never read back (nothing
  // trains them).
  void Pull(std::vector<EmbeddingTable<float>>& tables, SparseOptimizer<float>& optimizer) const;

  // The rows `changed` names (a step's DYNAMIC admissions: train/backend.h) copied in
  // from `tables` and `optimizer`, weights, state and rounding keys (`keys`, as Push's),
  // after keeping what those rows held on the device; RestoreRows puts back what the last call
  // replaced (the step failed), ForgetReplacedRows and the next ReplaceRows forget it (a table's
  // rows are recorded only once replaced, so a call that throws leaves what it did to restore).
  // Tables not held are skipped. ReplaceRows and RestoreRows synchronize the stream.
  void ReplaceRows(const std::vector<ChangedRows>& changed,
                   const std::vector<EmbeddingTable<float>>& tables,
                   SparseOptimizer<float>& optimizer, const RowKeys& keys);
  void RestoreRows();
  void ForgetReplacedRows();
  // The rows `rows` names copied out into `tables` and `optimizer` (weights and state),
  // where the table is held. Synchronizes the stream.
  void PullRows(const ChangedRows& rows, std::vector<EmbeddingTable<float>>& tables,
                SparseOptimizer<float>& optimizer);

  // [features] specs for the pooled forward (device memory).
  const FeatureSpec* feature_specs() const { return feature_specs_.get(); }
  int32_t num_features() const { return num_features_; }
  // The pooled forward of `in`'s bags into out [batch x out_width] (device memory), on
  // the stream.
  void Pool(const DeviceBatch& in, float* out, int32_t out_width) const;
  // The fused backward's arguments for `in` and d_pooled [batch x pooled_width] (device
  // memory); skip: nonzero when the update must change nothing (or null).
  EmbeddingBackwardArgs SparseArgs(const DeviceBatch& in, const float* d_pooled,
                                   int32_t pooled_width, const int32_t* skip) const;

 private:
  // Device arrays of one table: its rows (one of the three kinds), optimizer states and
  // rounding keys (a keyed table's: device_tables.cc Keyed; else empty).
  struct Table {
    DeviceBuffer<float> rows;
    DeviceBuffer<uint16_t> halves;
    DeviceBuffer<uint8_t> codes;
    std::vector<DeviceBuffer<float>> states;
    DeviceBuffer<int64_t> keys;
  };
  void Describe(const std::vector<EmbeddingTable<float>>& tables,
                const std::vector<FeatureBinding>& features);
  // A held table's arrays as moves of its packed rows (row_moves.h): the weights (FP32 or
  // 16-bit), then each optimizer state, in packed_row.h's order, each of the n device
  // `rows`; `packed` unset.
  std::vector<RowMove> RowArrays(size_t t, const EmbeddingTable<float>& table, const int64_t* rows,
                                 size_t n);
  // Per table, what the last ReplaceRows copied in: its rows, what they held (kept) and
  // the host's packed rows (incoming), reused from step to step; moves put kept back
  // (empty: nothing replaced).
  struct Replaced {
    DeviceBuffer<int64_t> rows;
    DeviceBuffer<uint16_t> kept, incoming;
    DeviceBuffer<uint16_t> kept_keys, incoming_keys;
    std::vector<RowMove> moves;
  };
  // Sets the keys of the device rows r->rows names (rows, already copied in) to
  // keys[rows[i]] after keeping the old ones; adds the move that puts them back to
  // r->moves. Table t is keyed; `incoming` is host staging the caller keeps until it
  // synchronizes the stream.
  void ReplaceKeys(size_t t, const std::vector<int64_t>& rows, const int64_t* keys,
                   std::vector<int64_t>* incoming, Replaced* r);
  // One array's rows `move` names: gathers what they hold into `kept`, scatters
  // `incoming` over them (both packed as `move` says) and appends to *restore the move
  // that puts `kept` back (so a restore undoes exactly the arrays swapped so far).
  void SwapIn(RowMove move, uint16_t* kept, uint16_t* incoming, std::vector<RowMove>* restore);

  const cudaStream_t stream_;
  std::vector<Table> tables_;  // empty arrays for a table not held
  std::vector<char> held_;     // BoundTables of Push's features
  std::vector<Replaced> replaced_;
  DeviceBuffer<int64_t> pull_rows_;  // PullRows' rows and packed rows, reused
  DeviceBuffer<uint16_t> pulled_;
  DeviceBuffer<FeatureSpec> feature_specs_;
  DeviceBuffer<SparseFeatureArgs> sparse_features_;
  DeviceBuffer<SparseTableArgs> sparse_tables_;
  int32_t num_features_ = 0, num_tables_ = 0;
  int32_t max_dim_ = 1;
  int32_t id_bits_ = 0;  // EmbeddingBackward::IdBitsFor the longest table
};

}  // namespace dlrm::cuda

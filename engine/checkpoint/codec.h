// The one codec of checkpoint contents, shared by the single-process checkpoint
// (Engine::Save/Load) and the sharded one (sharded_checkpoint.h, ps/shard_store_file.h):
// format tags, tensor names, the step, layout metadata, and the dense state's tensors.
// A name or format defined here is defined nowhere else.
//
// Tensor names (PyTorch-like, so a reader in another language can find them):
//   <dense parameter>                    "bottom_mlp.0.weight", "top_mlp.2.bias", ...
//   dense_optimizer/<state>              the dense optimizer's state buffers
//   embedding.<key>.weight               a table ("embedding.t0.weight") or a shard of it
//   sparse_optimizer/<key>/<state>       the sparse optimizer's state of that table/shard
//   dynamic.<key>.<part>                 a DYNAMIC table's id state (AddDynamicRows)
//   ssd.<key>.stored                     an SSD table's stored-rows bitmap (AddSsdStored)
// An SSD table's rows are not tensors: they are a copy of the engine's row store in a
// directory beside the file, named by metadata kSsdRowsKey (SsdRowsDirPrefix).
//
// Errors: a file of another kind (its format tag names another format) is
// kFailedPrecondition; missing or unparsable metadata is kDataLoss (a damaged or foreign
// file). Every message names the file and the metadata key or tensor.
// Thread safety: stateless functions; the writers and readers they take are not shared.
#pragma once

#include <cstdint>
#include <deque>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "engine/checkpoint/checkpoint_file.h"
#include "engine/embedding/dynamic_rows.h"
#include "engine/embedding/quantized_row.h"
#include "engine/model/dlrm_model.h"
#include "engine/optim/dense_optimizer.h"

namespace dlrm::checkpoint {

// Format tags (metadata "format") of the files libdlrm writes.
inline constexpr const char* kEngineFormat = "libdlrm.checkpoint.v1";
inline constexpr const char* kShardStoreFormat = "libdlrm.shard_store.v1";
inline constexpr const char* kDenseStateFormat = "libdlrm.dense_state.v1";
inline constexpr const char* kManifestFormat = "libdlrm.manifest.v1";
// A model for serving (Engine::Export): the config, the step, the dense parameters, every
// table's weights and each DYNAMIC table's ids and rows; no optimizer or admission state.
inline constexpr const char* kServingFormat = "libdlrm.serving.v1";

inline constexpr auto kF32 = TensorEntry::FLOAT32;

std::string EmbeddingWeightName(const std::string& key);
std::string SparseStateName(const std::string& key, const std::string& state);
std::string DenseStateName(const std::string& state);

// Metadata the file's format promises; kDataLoss naming the key when it is absent.
const std::string& RequiredMetadata(const CheckpointReader& reader, const std::string& path,
                                    const std::string& key);
// kDataLoss without a format tag, kFailedPrecondition when it names another format.
void CheckFormat(const CheckpointReader& reader, const std::string& path, const char* want);

// The step travels as decimal metadata "step".
void WriteStep(int64_t step, CheckpointWriter* writer);  // kInvalidArgument if step < 0
int64_t ReadStep(const CheckpointReader& reader, const std::string& path);  // kDataLoss

// What a file must agree on with the state it is loaded into, as metadata entries written
// by the saver and compared one by one by the loader (so an error names the first
// difference). A count entry comes before the per-item ones: a file with more items fails
// on it.
using Layout = std::vector<std::pair<std::string, std::string>>;
void WriteLayout(const Layout& layout, CheckpointWriter* writer);
// kFailedPrecondition naming the key whose value differs ("this <target>").
void CheckLayout(const CheckpointReader& reader, const std::string& path, const Layout& want,
                 const char* target);
// Tensors the loader did not ask for mean the file holds state this target would drop.
void CheckNoOtherTensors(const CheckpointReader& reader, const std::string& path,
                         const std::set<std::string>& expected, const char* target);

// "[a, b, c]"; the names of optimizer state buffers (they identify the optimizer's kind).
std::string Join(const std::vector<std::string>& parts);
template <typename Buffers>
std::string StateNames(const Buffers& buffers) {
  std::vector<std::string> names;
  for (const auto& [name, buffer] : buffers) names.push_back(name);
  return Join(names);
}

// A float vector as one tensor of its length.
void AddVector(const std::string& name, const std::vector<float>& values, CheckpointWriter* writer);

// The dense parameters and the dense optimizer's state. optimizer is not const only
// because StateBuffers() is not; it is only read.
void AddDenseTensors(const DlrmModel<float>& model, DenseOptimizer<float>& optimizer,
                     CheckpointWriter* writer);
// Named state buffers, as an optimizer's StateBuffers() lists them.
using StateBufferList = std::vector<std::pair<std::string, std::vector<float>*>>;
// Reads what AddDenseTensors wrote into params (the model's dense_params() layout) and
// into state (named like the optimizer's StateBuffers(), each already sized: the live
// buffers of a fresh state, or staging copies); records every name read in expected.
void ReadDenseTensors(const CheckpointReader& reader, const DlrmModel<float>& model, float* params,
                      const StateBufferList& state, std::set<std::string>* expected = nullptr);

// A table, or a shard of one, named by `key` ("t0", "t0.rows_0_40.cols_0_8"), and its sparse
// optimizer state (the optimizer's StateBuffers(table) list). A BF16 / FP16 table's rows
// are a BFLOAT16 / FLOAT16 tensor, an FP32 table's a FLOAT32 one.
void AddEmbedding(const std::string& key, const EmbeddingTable<float>& table,
                  const StateBufferList& state, CheckpointWriter* writer);
// The dtype AddEmbedding stores the rows of `table` (FP32, BF16 or FP16) as.
TensorEntry::DType RowsDType(const EmbeddingTable<float>& table);
// Reads what AddEmbedding wrote into weights (table's rows x dim) and state (each already
// sized); records every name read in expected when given.
void ReadEmbedding(const CheckpointReader& reader, const std::string& key,
                   const EmbeddingTable<float>& table, float* weights, const StateBufferList& state,
                   std::set<std::string>* expected = nullptr);
// The same into the table's own rows, whatever their precision (FP32, BF16, FP16).
void ReadEmbedding(const CheckpointReader& reader, const std::string& key,
                   EmbeddingTable<float>* table, const StateBufferList& state,
                   std::set<std::string>* expected = nullptr);

// A quantized table's rows (num_rows x StoredRowBytes(precision, dim) bytes of codes,
// quantized_row.h) as the UINT8 tensor EmbeddingWeightName(key); borrowed until
// WriteAtomic. The precision itself is the config's (TableConfig.precision).
void AddQuantizedEmbedding(const std::string& key, int64_t num_rows, int32_t dim,
                           config::TableConfig::Precision precision, const uint8_t* codes,
                           CheckpointWriter* writer);
// Reads what AddQuantizedEmbedding wrote into table->codes(); kDataLoss naming the table
// and the row when a row's scale or bias is not finite or its scale is negative;
// kFailedPrecondition naming the table for an older export's rows (fp32 scale and bias).
void ReadQuantizedEmbedding(const CheckpointReader& reader, const std::string& path,
                            const std::string& key, EmbeddingTable<float>* table);

// The dense parameters alone (a serving model's: AddDenseTensors without the optimizer).
void AddDenseParams(const DlrmModel<float>& model, CheckpointWriter* writer);
// A serving model's dense parameters in `precision`: FP32 as AddDenseParams, BF16 or FP16
// each tensor narrowed to nearest (half_row.h) into owned, which the writer borrows until
// WriteAtomic, as a BFLOAT16 / FLOAT16 tensor of the same name and shape.
void AddServingDenseParams(const DlrmModel<float>& model, TablePrecision precision,
                           std::deque<std::vector<uint16_t>>* owned, CheckpointWriter* writer);
// Reads what AddServingDenseParams wrote, in whichever of its precisions each tensor is,
// into params (widened: exact); a tensor of another dtype is refused by ReadTensor.
void ReadServingDenseParams(const CheckpointReader& reader, const DlrmModel<float>& model,
                            float* params);
// A serving model's DYNAMIC table: its resident ids and their rows, as the tensors
// "dynamic.<key>.ids" and "dynamic.<key>.rows" (INT64, borrowed until WriteAtomic).
void AddServingIds(const std::string& key, const std::vector<int64_t>& ids,
                   const std::vector<int64_t>& rows, CheckpointWriter* writer);
// Reads what AddServingIds wrote; kDataLoss naming the table unless both are vectors of
// one length.
std::pair<std::vector<int64_t>, std::vector<int64_t>> ReadServingIds(const CheckpointReader& reader,
                                                                     const std::string& path,
                                                                     const std::string& key);

// A DYNAMIC table's id state (DynamicRowsSnapshot), as tensors "dynamic.<key>.<part>":
// ids, rows, last_steps, counts [resident ids] INT64 (least recently used first),
// freed_rows INT64, sketch UINT32 (empty without admission counting), and scalars INT64
// [7] = next_unused_row, last_resolved_step, lookups, hits, admitted, evicted, rejected.
// The snapshot is borrowed until the writer's WriteAtomic returns.
void AddDynamicRows(const std::string& key, const DynamicRowsSnapshot& snapshot,
                    CheckpointWriter* writer);
// Reads what AddDynamicRows wrote; kDataLoss naming the tensor when one is not a vector
// or the per-id tensors differ in length (DynamicRows::Restore checks the rest).
DynamicRowsSnapshot ReadDynamicRows(const CheckpointReader& reader, const std::string& path,
                                    const std::string& key,
                                    std::set<std::string>* expected = nullptr);

// An SSD table's stored-rows bitmap (SsdTier::stored_words) as INT64 [words], and back
// (kDataLoss naming the tensor unless it is a vector).
void AddSsdStored(const std::string& key, const std::vector<uint64_t>& words,
                  CheckpointWriter* writer);
std::vector<uint64_t> ReadSsdStored(const CheckpointReader& reader, const std::string& path,
                                    const std::string& key,
                                    std::set<std::string>* expected = nullptr);
// Metadata naming the directory, beside the checkpoint file, of its SSD tables' rows.
inline constexpr const char* kSsdRowsKey = "ssd_rows";
// Every such directory of the checkpoint at `path` is named this prefix plus a suffix of
// its own: "<file name>.rows-".
std::string SsdRowsDirPrefix(const std::string& path);
// The file whose lock serializes saves of the checkpoint at `path` that have SSD tables,
// by any engine of any process: "<path>.lock" (left in place; it holds nothing).
std::string SsdSaveLockPath(const std::string& path);

// Staging copies of live state buffers, for a load that must change nothing until every
// tensor was read: read into list(), then Commit() copies into the live buffers (copies,
// not swaps: the live buffers keep their allocation and any page advice).
class StagedState {
 public:
  explicit StagedState(const StateBufferList& live);
  // A copy would point into the original's copies; a move keeps them where they are.
  StagedState(const StagedState&) = delete;
  StagedState& operator=(const StagedState&) = delete;
  StagedState(StagedState&&) = default;
  const StateBufferList& list() const { return staged_; }
  void Commit() const;

 private:
  StateBufferList live_;
  std::vector<std::vector<float>> copies_;
  StateBufferList staged_;  // names of live_, pointers into copies_
};

// How the config a checkpoint was written under fits the one it is loaded into: the
// state's shapes and kinds depend on the model and the optimizer kinds, nothing else.
enum class ConfigFit { kFits, kOtherModel, kOtherOptimizerKinds };
// model_diff receives the model's field differences (saved vs config) for kOtherModel.
ConfigFit CompareConfigs(const config::DlrmConfig& saved, const config::DlrmConfig& config,
                         std::string* model_diff);

}  // namespace dlrm::checkpoint

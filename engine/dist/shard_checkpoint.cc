#include "engine/dist/shard_checkpoint.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <utility>
#include <vector>

#include <google/protobuf/text_format.h>

#include "engine/config/text_proto.h"
#include "engine/core/status.h"
#include "engine/io/checkpoint_file.h"

namespace dlrm::dist {
namespace {

namespace fs = std::filesystem;

constexpr const char* kShardStoreFormat = "libdlrm.shard_store.v1";
constexpr const char* kDenseStateFormat = "libdlrm.dense_state.v1";
constexpr const char* kManifestFormat = "libdlrm.manifest.v1";
constexpr auto kF32 = io::TensorEntry::FLOAT32;

// What a file must agree on with the state it is loaded into, as metadata entries written
// by Save* and compared one by one by Load* (so an error can name the first difference).
// A count entry comes before the per-item ones: a file with more items fails on it.
using Layout = std::vector<std::pair<std::string, std::string>>;

std::string Join(const std::vector<std::string>& parts) {
  std::string out;
  for (const std::string& p : parts) out += (out.empty() ? "" : ", ") + p;
  return "[" + out + "]";
}

std::string ShapeText(const std::vector<int64_t>& shape) {
  std::vector<std::string> dims;
  for (const int64_t d : shape) dims.push_back(std::to_string(d));
  return Join(dims);
}

std::string OwnerText(int32_t owner) {
  return owner == kTrainerReplica ? "the trainers' replicas" : "server " + std::to_string(owner);
}

template <typename Buffers>
std::string StateNames(const Buffers& buffers) {
  std::vector<std::string> names;
  for (const auto& [name, buffer] : buffers) names.push_back(name);
  return Join(names);
}

// Metadata the file's format promises; its absence means a damaged or foreign file.
const std::string& RequiredMetadata(const CheckpointReader& reader, const std::string& path,
                                    const std::string& key) {
  const auto it = reader.metadata().find(key);
  if (it == reader.metadata().end())
    Throw(StatusCode::kDataLoss, "checkpoint ", path, " lacks metadata \"", key, "\"");
  return it->second;
}

void CheckFormat(const CheckpointReader& reader, const std::string& path, const char* want) {
  const auto it = reader.metadata().find("format");
  const std::string found = it == reader.metadata().end() ? "" : it->second;
  if (found != want)
    Throw(StatusCode::kFailedPrecondition, "checkpoint ", path, " has format \"", found,
          "\", expected \"", want, "\"");
}

// Decimal, as written by std::to_string; anything else is a damaged file.
int64_t ParseStep(const CheckpointReader& reader, const std::string& path) {
  const std::string& text = RequiredMetadata(reader, path, "step");
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno == ERANGE || v < 0)
    Throw(StatusCode::kDataLoss, "checkpoint ", path, ": metadata \"step\" is not a step count: \"",
          text, "\"");
  return static_cast<int64_t>(v);
}

void CheckStepToSave(int64_t step) {
  if (step < 0) ThrowInvalid("checkpoint step must be >= 0, got ", step);
}

void CheckLayout(const CheckpointReader& reader, const std::string& path, const Layout& want,
                 const char* target) {
  for (const auto& [key, value] : want) {
    const std::string& found = RequiredMetadata(reader, path, key);
    if (found != value)
      Throw(StatusCode::kFailedPrecondition, "checkpoint ", path, " does not fit this ", target,
            ": ", key, " is ", found, " in the checkpoint, ", value, " here");
  }
}

// Tensors the loader did not ask for mean the file holds state this target would drop.
void CheckNoOtherTensors(const CheckpointReader& reader, const std::string& path,
                         const std::set<std::string>& expected, const char* target) {
  for (const std::string& name : reader.TensorNames()) {
    if (expected.count(name) == 0)
      Throw(StatusCode::kFailedPrecondition, "checkpoint ", path, " holds tensor '", name,
            "', which this ", target, " does not have");
  }
}

void WriteLayout(const Layout& layout, CheckpointWriter* writer) {
  for (const auto& [key, value] : layout) writer->SetMetadata(key, value);
}

// ---- shard store ---------------------------------------------------------------------

// Names a shard by what it holds, so that a tensor name alone says where it belongs.
std::string ShardKey(const EmbeddingShardStore& store, int32_t i) {
  const ShardLocation& s = store.shards()[i];
  std::ostringstream os;
  os << store.shard_table(i).name() << ".rows_" << s.row_begin << "_" << s.row_end << ".cols_"
     << s.col_begin << "_" << s.col_end;
  return os.str();
}

std::string ShardWeightName(const std::string& key) { return "embedding." + key + ".weight"; }
std::string ShardStateName(const std::string& key, const std::string& state) {
  return "sparse_optimizer/" + key + "/" + state;
}

// Every shard's table, rows and columns, and the optimizer's state names (its kind: none
// for SGD, sum_sq, row_sum_sq, exp_avg + exp_avg_sq).
Layout ShardLayout(const EmbeddingShardStore& store, SparseOptimizer<float>& optimizer) {
  const auto n = static_cast<int32_t>(store.shards().size());
  Layout layout{{"num_shards", std::to_string(n)}};
  for (int32_t i = 0; i < n; ++i) {
    const ShardLocation& s = store.shards()[i];
    std::ostringstream os;
    os << "table " << store.shard_table(i).name() << " rows [" << s.row_begin << ", "
       << s.row_end << ") columns [" << s.col_begin << ", " << s.col_end << ")";
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

// ---- dense state ---------------------------------------------------------------------

Layout DenseLayout(const DlrmModel<float>& model, DenseOptimizer<float>& optimizer) {
  const auto& infos = model.dense_param_infos();
  Layout layout{{"num_dense_params", std::to_string(infos.size())}};
  for (size_t k = 0; k < infos.size(); ++k)
    layout.emplace_back("dense_param." + std::to_string(k),
                        infos[k].name + " " + ShapeText(infos[k].shape));
  layout.emplace_back("dense_optimizer_state", StateNames(optimizer.StateBuffers()));
  return layout;
}

std::string DenseStateName(const std::string& state) { return "dense_optimizer/" + state; }

// ---- manifest ------------------------------------------------------------------------

std::string ManifestPath(const std::string& dir) {
  return (fs::path(dir) / kManifestFile).string();
}

template <typename... Parts>
[[noreturn]] void ThrowBadManifest(const std::string& dir, Parts&&... parts) {
  Throw(StatusCode::kDataLoss, "checkpoint ", dir, ": ", std::forward<Parts>(parts)...);
}

// Size and CRC32C of a whole file, read in pieces.
CheckpointFile MeasureFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) Throw(StatusCode::kIo, "cannot read ", path.string());
  std::vector<char> buffer(size_t{1} << 20);
  uint32_t crc = 0;
  uint64_t bytes = 0;
  while (in) {
    in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
    const auto got = static_cast<size_t>(in.gcount());
    crc = Crc32c(crc, buffer.data(), got);
    bytes += got;
  }
  if (in.bad()) Throw(StatusCode::kIo, "cannot read ", path.string());
  CheckpointFile file;
  file.set_num_bytes(bytes);
  file.set_crc32c(crc);
  return file;
}

std::string Hex(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

void VerifyFile(const std::string& dir, const CheckpointFile& entry, const std::string& what) {
  const std::string& name = entry.name();
  const fs::path rel(name);
  bool leaves = name.empty() || rel.is_absolute();
  for (const fs::path& part : rel) leaves |= part == "..";
  if (leaves) ThrowBadManifest(dir, "MANIFEST names ", what, " file \"", name, "\" outside it");
  if (!entry.has_num_bytes() || !entry.has_crc32c())
    ThrowBadManifest(dir, "MANIFEST lacks the size or CRC of file ", name);
  const fs::path path = fs::path(dir) / rel;
  std::error_code ec;
  if (!fs::is_regular_file(path, ec))
    ThrowBadManifest(dir, "file ", name, " (", what, ") listed in MANIFEST is missing");
  const CheckpointFile found = MeasureFile(path);
  if (found.num_bytes() != entry.num_bytes())
    ThrowBadManifest(dir, "file ", name, " has ", found.num_bytes(), " bytes, MANIFEST records ",
                     entry.num_bytes());
  if (found.crc32c() != entry.crc32c())
    ThrowBadManifest(dir, "file ", name, " has CRC32C ", Hex(found.crc32c()),
                     ", MANIFEST records ", Hex(entry.crc32c()));
}

}  // namespace

std::string ServerShardFile(int32_t server) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "server-%05d.shards", static_cast<int>(server));
  return buf;
}

void SaveShardStore(const EmbeddingShardStore& store, int32_t owner, int64_t step,
                    const std::string& path) {
  CheckStepToSave(step);
  CheckStoreOwner(store, owner);
  // StateBuffers() is not const because it hands out pointers for restoring; here they are
  // only read.
  SparseOptimizer<float>& optimizer = const_cast<EmbeddingShardStore&>(store).optimizer();
  CheckpointWriter writer;
  writer.SetMetadata("format", kShardStoreFormat);
  writer.SetMetadata("owner", std::to_string(owner));
  writer.SetMetadata("step", std::to_string(step));
  WriteLayout(ShardLayout(store, optimizer), &writer);
  for (int32_t i = 0; i < static_cast<int32_t>(store.shards().size()); ++i) {
    const std::string key = ShardKey(store, i);
    const EmbeddingTable<float>& table = store.shard_table(i);
    writer.AddTensor(ShardWeightName(key), kF32, {table.num_rows(), table.dim()},
                     table.data().data(), table.data().size() * sizeof(float));
    for (const auto& [name, buffer] : optimizer.StateBuffers(i))
      writer.AddTensor(ShardStateName(key, name), kF32, {static_cast<int64_t>(buffer->size())},
                       buffer->data(), buffer->size() * sizeof(float));
  }
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
  const int64_t step = ParseStep(reader, path);
  SparseOptimizer<float>& optimizer = store->optimizer();
  CheckLayout(reader, path, ShardLayout(*store, optimizer), "shard store");

  // Stage everything; the store changes only once every tensor was read.
  struct Staged {
    std::vector<float> weights;
    std::vector<std::vector<float>> state;  // in StateBuffers order
  };
  const auto n = static_cast<int32_t>(store->shards().size());
  std::vector<Staged> staged(n);
  std::set<std::string> expected;
  for (int32_t i = 0; i < n; ++i) {
    const std::string key = ShardKey(*store, i);
    const EmbeddingTable<float>& table = store->shard_table(i);
    staged[i].weights.resize(table.data().size());
    expected.insert(ShardWeightName(key));
    reader.ReadTensor(ShardWeightName(key), kF32, {table.num_rows(), table.dim()},
                      staged[i].weights.data());
    for (const auto& [name, buffer] : optimizer.StateBuffers(i)) {
      std::vector<float>& values = staged[i].state.emplace_back(buffer->size());
      expected.insert(ShardStateName(key, name));
      reader.ReadTensor(ShardStateName(key, name), kF32, {static_cast<int64_t>(buffer->size())},
                        values.data());
    }
  }
  CheckNoOtherTensors(reader, path, expected, "shard store");

  // Copies, not swaps: the live buffers keep their allocation (and any page advice).
  for (int32_t i = 0; i < n; ++i) {
    std::vector<float>& weights = store->mutable_shard_table(i).data();
    std::copy(staged[i].weights.begin(), staged[i].weights.end(), weights.begin());
    const auto buffers = optimizer.StateBuffers(i);
    for (size_t b = 0; b < buffers.size(); ++b)
      std::copy(staged[i].state[b].begin(), staged[i].state[b].end(), buffers[b].second->begin());
  }
  return step;
}

void SaveDenseState(const DlrmModel<float>& model, DenseOptimizer<float>& optimizer,
                    int64_t step, const std::string& path) {
  CheckStepToSave(step);
  CheckpointWriter writer;
  writer.SetMetadata("format", kDenseStateFormat);
  writer.SetMetadata("step", std::to_string(step));
  WriteLayout(DenseLayout(model, optimizer), &writer);
  for (const DenseParamInfo& info : model.dense_param_infos())
    writer.AddTensor(info.name, kF32, info.shape, model.dense_params().data() + info.offset,
                     info.size * sizeof(float));
  for (const auto& [name, buffer] : optimizer.StateBuffers())
    writer.AddTensor(DenseStateName(name), kF32, {static_cast<int64_t>(buffer->size())},
                     buffer->data(), buffer->size() * sizeof(float));
  writer.WriteAtomic(path);
}

int64_t LoadDenseState(DlrmModel<float>* model, DenseOptimizer<float>* optimizer,
                       const std::string& path) {
  if (model == nullptr || optimizer == nullptr)
    ThrowInvalid("LoadDenseState: model or optimizer is null");
  const CheckpointReader reader(path);
  CheckFormat(reader, path, kDenseStateFormat);
  const int64_t step = ParseStep(reader, path);
  CheckLayout(reader, path, DenseLayout(*model, *optimizer), "model");

  std::set<std::string> expected;
  // Starts as the live values: parameters outside every named view (none today) keep them.
  std::vector<float> params = model->dense_params();
  for (const DenseParamInfo& info : model->dense_param_infos()) {
    expected.insert(info.name);
    reader.ReadTensor(info.name, kF32, info.shape, params.data() + info.offset);
  }
  const auto buffers = optimizer->StateBuffers();
  std::vector<std::vector<float>> state;
  for (const auto& [name, buffer] : buffers) {
    std::vector<float>& values = state.emplace_back(buffer->size());
    expected.insert(DenseStateName(name));
    reader.ReadTensor(DenseStateName(name), kF32, {static_cast<int64_t>(buffer->size())},
                      values.data());
  }
  CheckNoOtherTensors(reader, path, expected, "model");

  std::copy(params.begin(), params.end(), model->dense_params().begin());
  for (size_t b = 0; b < buffers.size(); ++b)
    std::copy(state[b].begin(), state[b].end(), buffers[b].second->begin());
  return step;
}

CheckpointFile DescribeFile(const std::string& dir, const std::string& name) {
  CheckpointFile file = MeasureFile(fs::path(dir) / name);
  file.set_name(name);
  return file;
}

void WriteManifest(const std::string& dir, const CheckpointManifest& manifest) {
  if (manifest.step() < 0) ThrowInvalid("manifest step must be >= 0, got ", manifest.step());
  std::string text;
  if (!google::protobuf::TextFormat::PrintToString(manifest, &text))
    Throw(StatusCode::kInternal, "cannot print the manifest of ", dir);
  // A CheckpointWriter file with no tensors: atomic, fsync'ed and CRC-checked for free.
  CheckpointWriter writer;
  writer.SetMetadata("format", kManifestFormat);
  writer.SetMetadata("manifest", text);
  writer.WriteAtomic(ManifestPath(dir));
}

CheckpointManifest ReadManifest(const std::string& dir) {
  const std::string path = ManifestPath(dir);
  std::error_code ec;
  if (!fs::exists(path, ec))
    Throw(StatusCode::kNotFound, "checkpoint ", dir, " has no ", kManifestFile,
          ": it is incomplete (interrupted while saving) or not a checkpoint directory");
  const CheckpointReader reader(path);
  const auto format = reader.metadata().find("format");
  if (format == reader.metadata().end() || format->second != kManifestFormat)
    ThrowBadManifest(dir, kManifestFile, " is not a manifest (format tag \"",
                     format == reader.metadata().end() ? "" : format->second, "\")");
  CheckpointManifest manifest;
  const std::string errors =
      ParseTextProto(RequiredMetadata(reader, path, "manifest"), &manifest);
  if (!errors.empty()) ThrowBadManifest(dir, kManifestFile, " does not parse: ", errors);

  if (!manifest.has_step() || manifest.step() < 0)
    ThrowBadManifest(dir, kManifestFile, " has step ", manifest.step(), ", expected >= 0");
  if (manifest.num_servers() < 0 || manifest.servers_size() != manifest.num_servers())
    ThrowBadManifest(dir, kManifestFile, " lists ", manifest.servers_size(),
                     " server files for ", manifest.num_servers(), " servers");
  if (manifest.has_plan() && manifest.plan().num_servers() != manifest.num_servers())
    ThrowBadManifest(dir, kManifestFile, "'s plan has ", manifest.plan().num_servers(),
                     " servers, the manifest ", manifest.num_servers());
  for (int i = 0; i < manifest.servers_size(); ++i) {
    if (manifest.servers(i).server() != i)
      ThrowBadManifest(dir, kManifestFile, " lists server ", manifest.servers(i).server(),
                       " at position ", i, " (expected server order)");
  }
  if (manifest.has_dense_state()) VerifyFile(dir, manifest.dense_state(), "dense state");
  if (manifest.has_replicas()) VerifyFile(dir, manifest.replicas(), "replicas");
  for (const ServerShardsEntry& server : manifest.servers())
    VerifyFile(dir, server.file(), "shards of server " + std::to_string(server.server()));
  return manifest;
}

}  // namespace dlrm::dist

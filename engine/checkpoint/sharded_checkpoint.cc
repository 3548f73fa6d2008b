#include "engine/checkpoint/sharded_checkpoint.h"

#include <google/protobuf/text_format.h>
#include <google/protobuf/util/message_differencer.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <utility>
#include <vector>

#include "engine/checkpoint/checkpoint_file.h"
#include "engine/checkpoint/codec.h"
#include "engine/config/config.h"
#include "engine/config/text_proto.h"
#include "engine/core/status.h"

namespace dlrm::checkpoint {
namespace {

namespace fs = std::filesystem;

// ---- dense state ---------------------------------------------------------------------

std::string ShapeText(const std::vector<int64_t>& shape) {
  std::vector<std::string> dims;
  for (const int64_t d : shape) dims.push_back(std::to_string(d));
  return Join(dims);
}

Layout DenseLayout(const DlrmModel<float>& model, DenseOptimizer<float>& optimizer) {
  const auto& infos = model.dense_param_infos();
  Layout layout{{"num_dense_params", std::to_string(infos.size())}};
  for (size_t k = 0; k < infos.size(); ++k)
    layout.emplace_back("dense_param." + std::to_string(k),
                        infos[k].name + " " + ShapeText(infos[k].shape));
  layout.emplace_back("dense_optimizer_state", StateNames(optimizer.StateBuffers()));
  return layout;
}

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
    ThrowBadManifest(dir, "file ", name, " has CRC32C ", Hex(found.crc32c()), ", MANIFEST records ",
                     Hex(entry.crc32c()));
}

}  // namespace

std::string ServerShardFile(int32_t server) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "server-%05d.shards", static_cast<int>(server));
  return buf;
}

void SaveDenseState(const DlrmModel<float>& model, DenseOptimizer<float>& optimizer, int64_t step,
                    const std::string& path) {
  CheckpointWriter writer;
  WriteStep(step, &writer);
  writer.SetMetadata("format", kDenseStateFormat);
  WriteLayout(DenseLayout(model, optimizer), &writer);
  AddDenseTensors(model, optimizer, &writer);
  writer.WriteAtomic(path);
}

int64_t LoadDenseState(DlrmModel<float>* model, DenseOptimizer<float>* optimizer,
                       const std::string& path) {
  if (model == nullptr || optimizer == nullptr)
    ThrowInvalid("LoadDenseState: model or optimizer is null");
  const CheckpointReader reader(path);
  CheckFormat(reader, path, kDenseStateFormat);
  const int64_t step = ReadStep(reader, path);
  CheckLayout(reader, path, DenseLayout(*model, *optimizer), "model");

  // Staged: parameters start as the live values (those outside every named view, none
  // today, keep them); the live state changes only once every tensor was read.
  std::vector<float> params = model->dense_params();
  const StagedState state(optimizer->StateBuffers());
  std::set<std::string> expected;
  ReadDenseTensors(reader, *model, params.data(), state.list(), &expected);
  CheckNoOtherTensors(reader, path, expected, "model");

  std::copy(params.begin(), params.end(), model->dense_params().begin());
  state.Commit();
  return step;
}

CheckpointFile DescribeFile(const std::string& dir, const std::string& name) {
  CheckpointFile file = MeasureFile(fs::path(dir) / name);
  file.set_name(name);
  return file;
}

void CreateCheckpointDir(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) Throw(StatusCode::kIo, "cannot create checkpoint directory ", dir, ": ", ec.message());
}

void BeginCheckpointDir(const std::string& dir) {
  CreateCheckpointDir(dir);
  RemoveDurably(ManifestPath(dir));
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
  CheckFormat(reader, path, kManifestFormat);
  CheckpointManifest manifest;
  const std::string errors = ParseTextProto(RequiredMetadata(reader, path, "manifest"), &manifest);
  if (!errors.empty()) ThrowBadManifest(dir, kManifestFile, " does not parse: ", errors);

  if (!manifest.has_step() || manifest.step() < 0)
    ThrowBadManifest(dir, kManifestFile, " has step ", manifest.step(), ", expected >= 0");
  if (manifest.num_servers() < 0 || manifest.servers_size() != manifest.num_servers())
    ThrowBadManifest(dir, kManifestFile, " lists ", manifest.servers_size(), " server files for ",
                     manifest.num_servers(), " servers");
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

CheckpointManifest ManifestForRestore(const std::string& dir, const config::DlrmConfig& config) {
  const CheckpointManifest manifest = ReadManifest(dir);
  const auto differ = [&](const std::string& what, const std::string& saved,
                          const std::string& now) {
    Throw(StatusCode::kFailedPrecondition, "checkpoint ", dir, " cannot be restored into this ",
          "job: its ", what, " (", saved, ") differs from this job's (", now, ")");
  };
  config::DlrmConfig saved;
  try {
    saved = ParseConfigText(manifest.config());
  } catch (const Error& e) {
    Throw(StatusCode::kDataLoss, "checkpoint ", dir, ": the manifest's config: ", e.what());
  }
  std::string differences;
  const ConfigFit fit = CompareConfigs(saved, config, &differences);
  if (fit == ConfigFit::kOtherModel) differ("model", "see: " + differences, "the config given");
  if (fit == ConfigFit::kOtherOptimizerKinds)
    differ("optimizer kinds", "dense/sparse of the saved config", "the config given");
  return manifest;
}

bool SameLayout(const CheckpointManifest& manifest, int32_t num_servers, int32_t num_trainers,
                const shard::ShardingPlan& plan) {
  return manifest.num_servers() == num_servers && manifest.num_trainers() == num_trainers &&
         google::protobuf::util::MessageDifferencer::Equals(manifest.plan(), plan);
}

}  // namespace dlrm::checkpoint

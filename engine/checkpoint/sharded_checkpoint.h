// Sharded checkpoints of multi-process training: each embedding server writes its shards,
// one trainer writes the dense state (and the DATA_PARALLEL replicas), and a manifest ties
// the files of one step together. Restoring onto the same layout (config, plan, servers)
// resumes training where it stopped.
//
// A checkpoint directory holds
//   server-00000.shards ...  SaveShardStore of each server's store
//   trainer.replicas         SaveShardStore of a trainer's replicas (owner kTrainerReplica)
//   trainer.dense            SaveDenseState
//   MANIFEST                 WriteManifest: step, config, plan, and every file's size + CRC
// The shard store files are written by engine/ps/shard_store_file.h (the stores are the
// parameter server's); every name and format tag comes from codec.h.
// Every file is a CheckpointWriter file (engine/checkpoint/checkpoint_file.h): written atomically
// and CRC-checked on load. The directory is complete only once MANIFEST is written, so it
// must be written last, after every other file is in place; a directory without MANIFEST
// is an interrupted checkpoint and must not be restored (ReadManifest: kNotFound).
//
// Each Load* reads and verifies its whole file into staging buffers and copies into the
// live state only when every read succeeded: a failed load changes nothing. Callers must
// not run updates on the same store / model / optimizer during a Save* or Load*.
#pragma once

#include <cstdint>
#include <string>

#include "engine/checkpoint/manifest.pb.h"
#include "engine/config/dlrm.pb.h"
#include "engine/model/dlrm_model.h"
#include "engine/optim/dense_optimizer.h"
#include "engine/shard/plan.pb.h"

namespace dlrm::checkpoint {

inline constexpr const char* kManifestFile = "MANIFEST";
inline constexpr const char* kDenseStateFile = "trainer.dense";
inline constexpr const char* kReplicaShardFile = "trainer.replicas";

// "server-00003.shards" for server 3.
std::string ServerShardFile(int32_t server);

// Dense parameters (the names of Engine::Save: "bottom_mlp.0.weight", ...), the dense
// optimizer's state ("dense_optimizer/<name>") and the step. optimizer is not const only
// because StateBuffers() is not; it is only read.
void SaveDenseState(const DlrmModel<float>& model, DenseOptimizer<float>& optimizer, int64_t step,
                    const std::string& path);

// Restores a SaveDenseState file and returns its step. Throws kIo / kDataLoss for an
// unreadable or corrupt file, kFailedPrecondition naming the difference for a file of
// another kind, parameter layout or optimizer kind; model and optimizer are unchanged then.
int64_t LoadDenseState(DlrmModel<float>* model, DenseOptimizer<float>* optimizer,
                       const std::string& path);

// The manifest entry of dir/name: its size and CRC32C (reads the whole file; kIo if it
// cannot be read).
CheckpointFile DescribeFile(const std::string& dir, const std::string& name);

// Creates `dir` and its parents where missing (kIo naming it when that fails): for a
// rank writing its files into a directory the lead rank may not have begun yet.
void CreateCheckpointDir(const std::string& dir);

// Readies `dir` for a checkpoint's files (creating it if missing) by taking away the
// MANIFEST of one written there before, durably: until WriteManifest the directory is
// incomplete, so a crash or a failed save leaves no old manifest beside new files (a
// directory neither checkpoint could be read from, that a restore would still choose).
// kIo naming what failed.
void BeginCheckpointDir(const std::string& dir);

// Writes dir/MANIFEST atomically (a CheckpointWriter file: temporary file, fsync, rename,
// directory fsync) holding the manifest as protobuf text. Call it last.
void WriteManifest(const std::string& dir, const CheckpointManifest& manifest);

// Reads dir/MANIFEST and checks it against the directory: kNotFound when there is no
// MANIFEST (an incomplete checkpoint), kDataLoss naming the problem when it does not parse
// or is inconsistent (step < 0, server entries not exactly 0..num_servers-1, a file name
// leaving the directory), or when a listed file is missing or differs from its recorded
// size or CRC.
CheckpointManifest ReadManifest(const std::string& dir);

// The manifest of the checkpoint in `dir` after checking that it can be restored into
// this job: the same model and optimizer kinds (kFailedPrecondition naming the
// difference). The servers, trainers and plan may differ (SameLayout says whether they
// do): the shards are then re-cut from the saved ones (ps/shard_store_file.h,
// LoadReshardedStore). The mode may differ too: the saved state is one consistent step.
CheckpointManifest ManifestForRestore(const std::string& dir, const config::DlrmConfig& config);

// Whether the checkpoint was written by a job of this layout: the same numbers of servers
// and trainers and the same plan, so each store's file can be loaded as it is.
bool SameLayout(const CheckpointManifest& manifest, int32_t num_servers, int32_t num_trainers,
                const shard::ShardingPlan& plan);

}  // namespace dlrm::checkpoint

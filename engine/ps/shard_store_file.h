// A shard store's file in a sharded checkpoint (engine/checkpoint/sharded_checkpoint.h
// has the directory layout and the files' names): each embedding server's shards, or the trainers'
// replicas of the DATA_PARALLEL tables. Tensor names, format tag and layout metadata come from the
// checkpoint codec (engine/checkpoint/codec.h).
//
// Errors: kIo / kDataLoss for a file that cannot be read or is corrupt,
// kFailedPrecondition naming the difference for a file of another kind, owner or layout;
// a failed load leaves the store unchanged. Callers must not run updates on the store
// during a save or load.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/checkpoint/manifest.pb.h"
#include "engine/ps/shard_store.h"

namespace dlrm::ps {

// Writes every shard's rows ("embedding.<table>.rows_<b>_<e>.cols_<b>_<e>.weight") and its
// sparse optimizer state ("sparse_optimizer/<table>.rows_..._cols_.../<state name>"), with
// metadata: format tag, owner, step and the layout (each shard's table, rows and columns,
// and the optimizer's state names, which identify its kind). owner must be the store's
// owner (kInvalidArgument otherwise). Throws kIo if the file cannot be written.
void SaveShardStore(const EmbeddingShardStore& store, int32_t owner, int64_t step,
                    const std::string& path);

// Restores a SaveShardStore file into store and returns its step. Throws kIo / kDataLoss
// for a file that cannot be read or is corrupt, kFailedPrecondition naming the difference
// when the file is of another kind, owner or layout. store is unchanged on any error.
int64_t LoadShardStore(EmbeddingShardStore* store, int32_t owner, const std::string& path);

// Restores store (of owner `owner`) from the sharded checkpoint in `dir`, whose manifest
// (ManifestForRestore: the same model and optimizer kinds) may come from a job of other
// server and trainer counts and another plan: each shard is cut from the saved pieces
// that overlap it (the servers' files and the replicas file), so a checkpoint written by
// N servers restores onto M. Returns the step. Errors as LoadShardStore, and kDataLoss
// naming the table and rows when the saved pieces do not cover a shard, or a file's step
// is not the manifest's; store is unchanged on any error.
int64_t LoadReshardedStore(EmbeddingShardStore* store, const std::string& dir,
                           const checkpoint::CheckpointManifest& manifest,
                           const config::ModelConfig& model);

// Restores whole tables, as one process holds them (tables[t] is model table t, [num_rows x
// dim]; optimizer is MakeSparseOptimizer over those shapes), from the sharded checkpoint in
// dir, whatever its servers, trainers and plan: each table is cut from the saved pieces as
// one shard (LoadReshardedStore, through a store of one owner holding every table whole).
// Returns the step. Errors as LoadReshardedStore; tables and optimizer are unchanged then.
// Memory: a second copy of every table and its state while it runs (and the resharding's
// staging).
int64_t LoadWholeTables(const std::string& dir, const checkpoint::CheckpointManifest& manifest,
                        const config::DlrmConfig& config,
                        std::vector<EmbeddingTable<float>>* tables,
                        SparseOptimizer<float>* optimizer);

}  // namespace dlrm::ps

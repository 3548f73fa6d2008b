// The CUDA side of a trainer that owns table shards (train/owned_shards.h, the Neo
// layout): the shards and their optimizer state held in the device's memory
// (device_tables.h), each step's local batch (the bags every rank sent this owner)
// copied in through pinned buffers, pooled in one launch and copied back for the
// exchange; the pooled gradient the ranks sent back copied in and applied by the fused
// backward + optimizer (embedding_backward.h). The store is copied in when this is made
// and after StoreChanged, and back by PullState once a step has changed the device's copy.
//
// Bits: the pooled rows and the updated rows and state are the host store's, bit for bit,
// given the same bags and gradients (stochastic rounding of a column-wise shard included:
// its bits are the whole table's). Its finite check reads the gradients only (as the
// single-process CUDA backend's).
// Errors: as OpenDevice; kInvalidArgument naming a shard the device cannot hold; kInternal
// naming a failing CUDA call. Threading: one call at a time (the trainer's thread).
#pragma once

#include <memory>

#include "engine/config/dlrm.pb.h"
#include "engine/core/thread_pool.h"
#include "engine/ps/shard_store.h"
#include "engine/train/owned_shards.h"

namespace dlrm::cuda {

// `store` (borrowed): the trainer's owned shards; `config` its validated config; `pool`
// (may be null) copies batches and rows through pinned memory.
std::unique_ptr<train::OwnedShards> MakeCudaOwnedShards(int ordinal, ps::EmbeddingShardStore* store,
                                                        const config::DlrmConfig& config,
                                                        ThreadPool* pool);

}  // namespace dlrm::cuda

// Where a trainer that owns table shards (model_parallel_trainer.h, the Neo layout) pools
// them and applies their fused update: on the host, by the store itself, or on the
// trainer's device (cuda/owned_shards.h: the shards in a GPU's memory, as Neo keeps them
// in HBM). The store (ps::EmbeddingShardStore) stays the host copy that checkpoints read
// and write: a device copies in the shards it pools (the store's local_features' tables,
// embedding_bag.h BoundTables) when made and when told the store changed (StoreChanged),
// and copies what it trained back when asked (PullState). The store's row-wise pieces,
// which it serves to every rank and updates with their gradients (model_parallel_trainer.h),
// are no feature's: they stay in host memory, trained by the store itself, and no device
// copy is ever written over them.
//
// Bits: a device pools and updates with the host's operations in the host's order
// (pooled_embedding.h, embedding_backward.h), so given the same bags and gradients its rows
// and state are the store's bit for bit. Where they differ: the host's PooledUpdateIsFinite
// also refuses an update that would overflow a finite row; a device checks the gradients
// only, as the single-process CUDA backend does.
//
// Ownership: borrows the store and the pool, which outlive it. Threading: one call at a
// time (the trainer's thread). Errors: as the store's; a device's failures kInternal naming
// the call, kFailedPrecondition where the device cannot be had (made by the factory).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "engine/config/dlrm.pb.h"
#include "engine/core/thread_pool.h"
#include "engine/data/batch.h"
#include "engine/ps/shard_store.h"

namespace dlrm::train {

class OwnedShards {
 public:
  virtual ~OwnedShards() = default;

  // "cpu", "cuda:0": for messages.
  virtual std::string name() const = 0;
  // As the store's Pool, PooledUpdateIsFinite and ApplyPooledUpdate: a local batch
  // (store.ValidateLocalBatch's), out [batch_size x pooled_width()] on the host; the
  // update's two halves with the same batch, the one Pool was given last.
  virtual void Pool(const ValidatedBatch& batch, float* out) = 0;
  virtual bool PooledUpdateIsFinite(const ValidatedBatch& batch, const float* d_pooled, float lr,
                                    int64_t step) = 0;
  virtual void ApplyPooledUpdate(const float* d_pooled, float lr, int64_t step) = 0;
  // The store's rows and optimizer state current (before a checkpoint reads them).
  virtual void PullState() = 0;
  // The store was written (a restore): it is the truth from here; a device copies it in
  // before its next call and never copies its older rows back over it.
  virtual void StoreChanged() = 0;
};

// Pools and updates in the store itself, with its pool.
std::unique_ptr<OwnedShards> MakeHostOwnedShards(ps::EmbeddingShardStore* store);

// Makes the owned shards' compute for config.device() (engine/device_backends.h).
using OwnedShardsFactory = std::function<std::unique_ptr<OwnedShards>(
    const config::DlrmConfig& config, ps::EmbeddingShardStore* store, ThreadPool* pool)>;

// factory's for config.device(); with no factory, the host's for kind CPU and
// kFailedPrecondition naming device.kind for any other (RequireHostDevice).
std::unique_ptr<OwnedShards> MakeOwnedShards(const OwnedShardsFactory& factory,
                                             const config::DlrmConfig& config,
                                             ps::EmbeddingShardStore* store, ThreadPool* pool);

// For a trainer's `what` made without the device factories: kFailedPrecondition naming
// config.device().kind unless it is CPU (never the CPU behind a device's config).
void RequireHostDevice(const config::DlrmConfig& config, const char* what);

}  // namespace dlrm::train

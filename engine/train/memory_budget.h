// Whether a model (its embedding tables and dense parameters) or a trainer's part of one
// fits in memory, decided from the config (and plan) alone before anything is allocated: a
// config of 1e12 rows, or a full-rank cross network of 26640 columns (22.7 GB), must fail
// at once with an error naming the bytes, not page-fault its way into the kernel's OOM
// killer while initializing them.
//
// Threading: any thread. Errors: kResourceExhausted naming the bytes needed, what they
// are (the largest table and its bytes), and the limit and where it comes from.
#pragma once

#include <cstdint>
#include <string>

#include "engine/config/dlrm.pb.h"
#include "engine/shard/plan.pb.h"

namespace dlrm::train {

// The dense parameters' bytes (both MLPs, the cross network): the parameters, their
// gradient and the dense optimizer's state, a float each per parameter. At least what a
// model holds: a step also keeps a gradient per chunk of rows, as many as its batch has.
int64_t DenseBytes(const config::DlrmConfig& config);

// What a model of `config` holds in memory: its tables (as below) and DenseBytes.
int64_t ModelMemoryBytes(const config::DlrmConfig& config);

// Refuses a config whose tables' weights and sparse optimizer state (CostModel's bytes,
// as the planner prices them) and DenseBytes exceed config.memory_limit_bytes, or the
// machine's memory when that is 0.
void CheckModelFitsMemory(const config::DlrmConfig& config);

// The same for trainer `rank` of a job planned as `plan`: its embedding shards when it
// owns them (plan.servers(rank), the Neo layout), the DATA_PARALLEL tables every trainer
// holds, and DenseBytes. Called before the trainer allocates any of them.
void CheckTrainerFitsMemory(const config::DlrmConfig& config, const shard::ShardingPlan& plan,
                            int32_t rank, bool owns_shards);

}  // namespace dlrm::train

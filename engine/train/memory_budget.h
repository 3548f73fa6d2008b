// Whether a model's embedding tables fit in memory, decided from the config alone before
// anything is allocated: a config of 1e12 rows must fail at once with an error naming the
// table, not page-fault its way into the kernel's OOM killer while initializing rows.
//
// Threading: any thread. Errors: kResourceExhausted naming the bytes needed, the largest
// table and its bytes, and the limit and where it comes from.
#pragma once

#include <cstdint>
#include <string>

#include "engine/config/dlrm.pb.h"

namespace dlrm::train {

// The machine's memory: physical RAM, or the cgroup's memory.max when that is lower; 0
// when unknown. *source names which ("physical memory", "cgroup memory.max").
int64_t MachineMemoryBytes(std::string* source);

// Refuses a config whose tables' weights and sparse optimizer state (CostModel's bytes,
// as the planner prices them) exceed config.memory_limit_bytes, or the machine's memory
// when that is 0.
void CheckModelFitsMemory(const config::DlrmConfig& config);

}  // namespace dlrm::train

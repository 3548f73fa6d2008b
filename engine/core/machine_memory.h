// How much memory this process can have: the machine's physical memory, or its cgroup's
// limit when that is lower. The memory budgets (config.h MemoryLimitBytes, and through it
// the engine's, a trainer's and an embedding server's checks) start here.
//
// Threading: any thread. Errors: none; 0 when nothing is known.
#pragma once

#include <cstdint>
#include <string>

namespace dlrm {

// Physical RAM, or cgroup v2's memory.max when that is lower; 0 when unknown. *source
// names which ("physical memory", "cgroup memory.max").
int64_t MachineMemoryBytes(std::string* source);

}  // namespace dlrm

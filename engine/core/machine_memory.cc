#include "engine/core/machine_memory.h"

#include <unistd.h>

#include <fstream>
#include <limits>

namespace dlrm {
namespace {

constexpr int64_t kUnlimited = std::numeric_limits<int64_t>::max();

// cgroup v2's memory.max ("max" or bytes); kUnlimited when absent or unlimited.
int64_t CgroupLimit() {
  std::ifstream in("/sys/fs/cgroup/memory.max");
  std::string text;
  if (!(in >> text) || text == "max" || text.find_first_not_of("0123456789") != std::string::npos ||
      text.size() > 18)
    return kUnlimited;
  return std::stoll(text);
}

}  // namespace

int64_t MachineMemoryBytes(std::string* source) {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  int64_t physical = pages > 0 && page > 0 ? static_cast<int64_t>(pages) * page : 0;
  *source = "physical memory";
  const int64_t cgroup = CgroupLimit();
  if (cgroup < physical || physical == 0) {
    if (cgroup == kUnlimited) return 0;
    *source = "cgroup memory.max";
    physical = cgroup;
  }
  return physical;
}

}  // namespace dlrm

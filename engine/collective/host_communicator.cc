#include "engine/collective/host_communicator.h"

#include <utility>

#include "engine/core/status.h"

namespace dlrm::collective {

HostCommunicator::HostCommunicator(AllGatherFn fn, int32_t rank, int32_t world_size)
    : fn_(std::move(fn)), rank_(rank), world_size_(world_size) {
  if (!fn_) ThrowInvalid("HostCommunicator: the all-gather function is null");
  if (world_size < 1 || rank < 0 || rank >= world_size)
    ThrowInvalid("HostCommunicator: rank ", rank, " is outside [0, ", world_size, ")");
}

std::vector<std::string> HostCommunicator::AllGather(const std::string& contribution) {
  std::vector<std::optional<std::string>> parts(world_size_);
  const int32_t rc = fn_(contribution, &parts);
  if (rc != 0)
    Throw(StatusCode::kNetwork, "the host's all-gather returned ", rc, " on trainer ", rank_);
  std::vector<std::string> all;
  all.reserve(world_size_);
  for (int32_t r = 0; r < world_size_; ++r) {
    if (!parts[r])
      Throw(StatusCode::kNetwork, "the host's all-gather gave trainer ", rank_,
            " no contribution of rank ", r, " (dlrm_gather_put was not called for it)");
    all.push_back(std::move(*parts[r]));
  }
  if (all[rank_] != contribution)
    Throw(StatusCode::kNetwork, "the host's all-gather returned other bytes as trainer ", rank_,
          "'s own contribution");
  return all;
}

}  // namespace dlrm::collective

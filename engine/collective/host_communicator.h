// The trainers' collective through a host's own all-gather: MPI, Spark's barrier
// allGather, a Java or Go function reached through the C ABI's dlrm_allgather_fn. The host
// is given this rank's contribution and fills in every rank's; this class checks what it
// got, so a faulty host fails the step with kNetwork naming what is missing, never with
// wrong bytes.
//
// Thread safety: one AllGather at a time (as every Communicator); the host function runs
// on the calling thread.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "engine/collective/communicator.h"

namespace dlrm::collective {

class HostCommunicator : public Communicator {
 public:
  // parts has world_size empty slots; the host sets parts[r] to rank r's contribution (its
  // own included) and returns 0, or returns its own nonzero error code.
  using AllGatherFn = std::function<int32_t(const std::string& contribution,
                                            std::vector<std::optional<std::string>>* parts)>;

  HostCommunicator(AllGatherFn fn, int32_t rank, int32_t world_size);
  int32_t rank() const override { return rank_; }
  int32_t world_size() const override { return world_size_; }
  // kNetwork when the host fails, leaves a rank out, or returns other bytes as this rank's.
  std::vector<std::string> AllGather(const std::string& contribution) override;

 private:
  AllGatherFn fn_;
  int32_t rank_, world_size_;
};

}  // namespace dlrm::collective

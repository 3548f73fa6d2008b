// A rank's communicator that rewrites what its next collective sends or receives, as a
// peer's malformed or hostile bytes would arrive (the trainers' suites: a forged part, a
// count no rank could hold, a contribution that does not decode).
//
// Ownership: owns the communicator it wraps. Threading: the rank's thread only; set a
// forge before the call it is for (each applies to the next such call, then clears).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/collective/communicator.h"

namespace dlrm::testing {

class ForgingCommunicator : public collective::Communicator {
 public:
  using Forge = std::function<void(std::vector<std::string>*)>;
  explicit ForgingCommunicator(std::unique_ptr<collective::Communicator> inner)
      : inner_(std::move(inner)) {}
  int32_t rank() const override { return inner_->rank(); }
  int32_t world_size() const override { return inner_->world_size(); }
  std::vector<std::string> AllGather(const std::string& contribution) override {
    std::vector<std::string> all = inner_->AllGather(
        forge_gather ? std::exchange(forge_gather, nullptr)(contribution) : contribution);
    if (forge_gathered) std::exchange(forge_gathered, nullptr)(&all);
    return all;
  }
  std::vector<std::string> AllToAll(const std::vector<std::string>& to_each) override {
    std::vector<std::string> parts = to_each;
    if (forge) std::exchange(forge, nullptr)(&parts);
    return inner_->AllToAll(parts);
  }

  Forge forge;  // the next AllToAll's parts, as sent
  std::function<std::string(const std::string&)> forge_gather;  // the next AllGather's, sent
  Forge forge_gathered;  // the next AllGather's contributions, as received

 private:
  std::unique_ptr<collective::Communicator> inner_;
};

}  // namespace dlrm::testing

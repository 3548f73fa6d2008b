#include "engine/collective/net_communicator.h"

#include <algorithm>
#include <optional>

#include "engine/collective/collective.pb.h"
#include "engine/core/log.h"
#include "engine/core/status.h"
#include "engine/net/message.h"

namespace dlrm::collective {
namespace {

// ALLGATHER: step = the all-gather's number, sender_rank; [U8 contribution].
net::Message EncodeAllGather(int64_t number, int32_t rank, const std::string& contribution) {
  RegisterMessageTypes();
  net::Message m = net::MakeMessage(ALLGATHER);
  m.header.set_step(number);
  m.header.set_sender_rank(rank);
  m.payloads.push_back(net::Payload::Copy(reinterpret_cast<const uint8_t*>(contribution.data()),
                                          static_cast<int64_t>(contribution.size())));
  return m;
}

}  // namespace

void RegisterMessageTypes() {
  [[maybe_unused]] static const bool once =
      net::RegisterMessageTypes("collective", &MessageType_descriptor);
}

NetCommunicator::NetCommunicator(const net::Context& context, net::Endpoint* listener,
                                 const std::vector<std::string>& addresses, int32_t rank,
                                 const net::TransportOptions& options,
                                 std::chrono::milliseconds timeout)
    : listener_(listener), rank_(rank), timeout_(timeout) {
  RegisterMessageTypes();
  if (listener_ == nullptr || listener_->kind() != net::Endpoint::kListen)
    ThrowInvalid("communicator: a listening endpoint is required");
  const auto size = static_cast<int32_t>(addresses.size());
  if (rank < 0 || rank >= size)
    ThrowInvalid("communicator: rank ", rank, " is outside [0, ", size, ")");
  peers_.resize(size);
  for (int32_t r = 0; r < size; ++r) {
    if (r == rank) continue;
    peers_[r] = std::make_unique<net::Endpoint>(context, net::Endpoint::kConnect, addresses[r],
                                                options, "trainer " + std::to_string(r));
  }
}

std::vector<std::string> NetCommunicator::AllGather(const std::string& contribution) {
  const int64_t number = ++number_;
  const int32_t size = world_size();
  for (int32_t r = 0; r < size; ++r)
    if (peers_[r]) peers_[r]->Send(EncodeAllGather(number, rank_, contribution));

  std::vector<std::string> all(size);
  std::vector<bool> have(size, false);
  all[rank_] = contribution;
  have[rank_] = true;
  int32_t missing = size - 1;
  if (auto it = early_.find(number); it != early_.end()) {
    for (auto& [r, bytes] : it->second) {
      all[r] = std::move(bytes);
      have[r] = true;
      --missing;
    }
    early_.erase(it);
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout_;
  while (missing > 0) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    std::optional<net::Received> got =
        listener_->TryReceive(std::max(left, std::chrono::milliseconds(0)));
    if (!got) {
      std::string who;
      for (int32_t r = 0; r < size; ++r)
        if (!have[r]) who += (who.empty() ? "" : ", ") + std::to_string(r);
      Throw(StatusCode::kTimeout, "trainer ", rank_, ": all-gather #", number,
            " got nothing from trainer(s) ", who, " within ", timeout_.count(),
            " ms (a trainer died, hangs, or failed before this step)");
    }
    const net::Header& h = got->message.header;
    const bool valid = h.type() == ALLGATHER && h.has_step() && h.has_sender_rank() &&
                       h.sender_rank() < size && h.sender_rank() != rank_ &&
                       got->message.payloads.size() == 1 &&
                       got->message.payloads[0].dtype() == net::PayloadDescriptor::U8;
    if (!valid || h.step() < number) {
      DLRM_LOG(kWarning) << "trainer " << rank_ << ": dropped "
                         << net::DescribeMessage(got->message) << " during all-gather #" << number;
      continue;
    }
    const net::Payload& p = got->message.payloads[0];
    std::string bytes(reinterpret_cast<const char*>(p.data<uint8_t>()),
                      static_cast<size_t>(p.count()));
    const int32_t from = h.sender_rank();
    if (h.step() > number) {
      early_[h.step()][from] = std::move(bytes);
      continue;
    }
    if (have[from])
      Throw(StatusCode::kDataLoss, "all-gather #", number, ": trainer ", from,
            " contributed twice");
    all[from] = std::move(bytes);
    have[from] = true;
    --missing;
  }
  return all;
}

}  // namespace dlrm::collective

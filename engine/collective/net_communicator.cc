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
                                 const std::vector<std::string>& addresses,
                                 const std::vector<std::string>& links, int32_t rank,
                                 const net::TransportOptions& options,
                                 std::chrono::milliseconds timeout)
    : listener_(listener), links_(links), rank_(rank), timeout_(timeout) {
  RegisterMessageTypes();
  if (listener_ == nullptr || listener_->kind() != net::Endpoint::kListen)
    ThrowInvalid("communicator: a listening endpoint is required");
  const auto size = static_cast<int32_t>(addresses.size());
  if (rank < 0 || rank >= size)
    ThrowInvalid("communicator: rank ", rank, " is outside [0, ", size, ")");
  if (links.size() != addresses.size())
    ThrowInvalid("communicator: ", links.size(), " links for ", size, " ranks");
  peers_.resize(size);
  for (int32_t r = 0; r < size; ++r) {
    if (r == rank) continue;
    peers_[r] = std::make_unique<net::Endpoint>(context, net::Endpoint::kConnect, addresses[r],
                                                options, "trainer " + std::to_string(r));
  }
}

std::vector<std::string> NetCommunicator::AllGather(const std::string& contribution) {
  return Collect([&](int32_t) -> const std::string& { return contribution; });
}

std::vector<std::string> NetCommunicator::AllToAll(const std::vector<std::string>& to_each) {
  CheckAllToAllParts(to_each, world_size());
  return Collect([&](int32_t r) -> const std::string& { return to_each[r]; });
}

std::vector<std::string> NetCommunicator::Collect(const PartFor& part_for) {
  const int64_t number = ++number_;
  const int32_t size = world_size();
  for (int32_t r = 0; r < size; ++r)
    if (peers_[r]) peers_[r]->Send(EncodeAllGather(number, rank_, part_for(r)));

  std::vector<std::string> all(size);
  std::vector<bool> have(size, false);
  all[rank_] = part_for(rank_);
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
      Throw(StatusCode::kTimeout, "trainer ", rank_, ": collective #", number,
            " got nothing from trainer(s) ", who, " within ", timeout_.count(),
            " ms (a trainer died, hangs, or failed before this step)");
    }
    if (Accept(*got, number, all, have)) --missing;
  }
  return all;
}

bool NetCommunicator::Accept(const net::Received& got, int64_t number,
                             std::vector<std::string>& all, std::vector<bool>& have) {
  const net::Header& h = got.message.header;
  const bool valid = h.type() == ALLGATHER && h.has_step() && h.has_sender_rank() &&
                     h.sender_rank() < world_size() && h.sender_rank() != rank_ &&
                     got.message.payloads.size() == 1 &&
                     got.message.payloads[0].dtype() == net::PayloadDescriptor::U8;
  if (!valid) return Drop(got, number, "not an ALLGATHER contribution of another rank");
  const std::optional<int32_t> linked = links_.RankOf(got);
  if (!linked) return Drop(got, number, "not from the connection of the rank it names");
  const int32_t from = *linked;
  if (h.step() != number && h.step() != number + 1)
    return Drop(got, number, "neither this all-gather's nor the next");
  std::map<int32_t, std::string>* early = h.step() > number ? &early_[h.step()] : nullptr;
  if (early ? early->count(from) > 0 : have[from])
    return Drop(got, number, "a second contribution of its rank");
  const net::Payload& p = got.message.payloads[0];
  std::string bytes(reinterpret_cast<const char*>(p.data<uint8_t>()),
                    static_cast<size_t>(p.count()));
  if (early) {
    (*early)[from] = std::move(bytes);
    return false;
  }
  all[from] = std::move(bytes);
  have[from] = true;
  return true;
}

bool NetCommunicator::Drop(const net::Received& got, int64_t number, const char* why) {
  ++dropped_;
  if (ShouldLogOccurrence(dropped_))
    DLRM_LOG(kWarning) << "trainer " << rank_ << ": dropped " << net::DescribeMessage(got.message)
                       << " during all-gather #" << number << ": " << why << " (" << dropped_
                       << " dropped so far)";
  return false;
}

}  // namespace dlrm::collective

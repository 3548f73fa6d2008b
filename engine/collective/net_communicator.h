// The trainers' collectives over the transport: every rank sends its contribution (the
// same bytes to all for AllGather, each rank its own for AllToAll) straight to every other
// rank (one message latency per collective, which is what a step pays in hybrid mode) and
// collects theirs, in rank order. Both are ALLGATHER messages numbered in one sequence.
//
// Each rank listens on its own endpoint (the address it gave at rendezvous) and connects
// to every other rank's. Contributions carry the collective's number, so a fast rank's
// next contribution (a rank is never more than one collective ahead) is kept until its
// turn. A rank that does not contribute within the timeout fails the collective with
// kTimeout naming it.
//
// Ranks are bound to connections: a contribution counts as rank r's only when it comes
// over rank r's own connection (links[r], the routing id r connects with). Anything else
// (another connection, a number that is neither this collective's nor the next, a second
// contribution, another message type) is dropped and counted, so a forged message cannot
// change a result or stop a rank, even without DLRM_SECRET.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/collective/communicator.h"
#include "engine/net/endpoint.h"

namespace dlrm::collective {

// Registers the collectives' types (collective.proto) with the transport's registry
// (net/message_types.h); the communicator calls it; idempotent.
void RegisterMessageTypes();

class NetCommunicator : public Communicator {
 public:
  // listener: this rank's listening endpoint (borrowed; it must receive nothing but
  // ALLGATHER messages). addresses[r]: where rank r listens; addresses[rank] is unused.
  // links[r]: the routing id rank r connects with (its options.routing_id); options: this
  // rank's, its routing_id being links[rank].
  NetCommunicator(const net::Context& context, net::Endpoint* listener,
                  const std::vector<std::string>& addresses, const std::vector<std::string>& links,
                  int32_t rank, const net::TransportOptions& options,
                  std::chrono::milliseconds timeout);

  int32_t rank() const override { return rank_; }
  int32_t world_size() const override { return static_cast<int32_t>(peers_.size()); }
  std::vector<std::string> AllGather(const std::string& contribution) override;
  std::vector<std::string> AllToAll(const std::vector<std::string>& to_each) override;

  // Messages dropped so far (forged, stale, repeated or of another type).
  int64_t dropped() const { return dropped_; }

 private:
  // One collective: part_for(r) is sent to rank r (and part_for(rank) kept); returns what
  // every rank sent this one, in rank order.
  using PartFor = std::function<const std::string&(int32_t rank)>;
  std::vector<std::string> Collect(const PartFor& part_for);
  // Files a received contribution under its collective and rank; false (after logging
  // why) when it is dropped. `number`: the collective under way.
  bool Accept(const net::Received& got, int64_t number, std::vector<std::string>& all,
              std::vector<bool>& have);
  // Counts and logs (rate-limited) a dropped message; returns false.
  bool Drop(const net::Received& got, int64_t number, const char* why);

  net::Endpoint* listener_;
  const net::RankLinks links_;
  const int32_t rank_;
  const std::chrono::milliseconds timeout_;
  std::vector<std::unique_ptr<net::Endpoint>> peers_;  // by rank; null for this rank
  int64_t number_ = 0;                                 // collectives done
  // Contributions that arrived early: collective number -> rank -> bytes.
  std::map<int64_t, std::map<int32_t, std::string>> early_;
  int64_t dropped_ = 0;
};

}  // namespace dlrm::collective

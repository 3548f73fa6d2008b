// The roster: who is in the job. Roster (cluster.proto) lists every peer by rank:
// peers(r).rank() == r, its role (SERVER or TRAINER) and the address it accepts
// connections on ("tcp://host:port", empty for a peer that accepts none).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/cluster/cluster.pb.h"

namespace dlrm::cluster {

// Ranks of the peers with `role`, ascending.
std::vector<int32_t> RanksWithRole(const Roster& roster, Role role);

// "server 1 (rank 1 at tcp://127.0.0.1:40001)": a peer as errors name it, numbered among
// the peers of its role as the job layout numbers them. kInvalidArgument for a bad rank.
std::string PeerName(const Roster& roster, int32_t rank);

// "rank 0 server tcp://127.0.0.1:40001, rank 1 trainer -, ..." for logs.
std::string DescribeRoster(const Roster& roster);

// The address other hosts should use for a peer that bound `bound` ("tcp://host:port"):
// a wildcard host (0.0.0.0, *, [::]) is replaced by `peer_ip`, the address the
// coordinator saw the peer's connection come from. Anything else is returned unchanged.
std::string AdvertisedAddress(const std::string& bound, const std::string& peer_ip);

// The host of a peer's address "tcp://host:port" (the scheme may be left out), without
// the brackets of an IPv6 address: "tcp://[::1]:5" gives "::1". kInvalidArgument else.
std::string EndpointHost(const std::string& endpoint);

}  // namespace dlrm::cluster

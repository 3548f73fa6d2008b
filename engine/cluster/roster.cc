#include "engine/cluster/roster.h"

#include <optional>
#include <sstream>

#include "engine/cluster/cluster_env.h"
#include "engine/core/status.h"

namespace dlrm::cluster {
namespace {

const std::string kTcpScheme = "tcp://";

struct SplitAddress {
  std::string host;  // as written: an IPv6 address keeps its brackets
  std::string port;  // ":port"
};

// "tcp://host:port" split at its last colon; nullopt for anything else.
std::optional<SplitAddress> SplitTcpAddress(const std::string& address) {
  if (address.compare(0, kTcpScheme.size(), kTcpScheme) != 0) return std::nullopt;
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon < kTcpScheme.size()) return std::nullopt;
  return SplitAddress{address.substr(kTcpScheme.size(), colon - kTcpScheme.size()),
                      address.substr(colon)};
}

}  // namespace

std::vector<int32_t> RanksWithRole(const Roster& roster, Role role) {
  std::vector<int32_t> ranks;
  for (const PeerInfo& p : roster.peers())
    if (p.role() == role) ranks.push_back(p.rank());
  return ranks;
}

std::string PeerName(const Roster& roster, int32_t rank) {
  if (rank < 0 || rank >= roster.peers_size())
    ThrowInvalid("rank ", rank, " is not in the roster of ", roster.peers_size(), " peers");
  const PeerInfo& peer = roster.peers(rank);
  int32_t index = 0;
  for (int32_t r = 0; r < rank; ++r) index += roster.peers(r).role() == peer.role();
  return StrCat(RoleName(peer.role()), " ", index, " (rank ", rank,
                peer.address().empty() ? "" : " at " + peer.address(), ")");
}

std::string DescribeRoster(const Roster& roster) {
  std::ostringstream os;
  for (int i = 0; i < roster.peers_size(); ++i) {
    const PeerInfo& p = roster.peers(i);
    os << (i ? ", " : "") << "rank " << p.rank() << " " << RoleName(p.role()) << " "
       << (p.address().empty() ? "-" : p.address());
  }
  return os.str();
}

std::string AdvertisedAddress(const std::string& bound, const std::string& peer_ip) {
  const std::optional<SplitAddress> split = SplitTcpAddress(bound);
  if (peer_ip.empty() || !split) return bound;
  const std::string& host = split->host;
  if (host != "0.0.0.0" && host != "*" && host != "[::]" && host != "[::0]") return bound;
  const bool v6 = peer_ip.find(':') != std::string::npos;
  return kTcpScheme + (v6 ? "[" + peer_ip + "]" : peer_ip) + split->port;
}

std::string EndpointHost(const std::string& endpoint) {
  const bool has_scheme = endpoint.rfind(kTcpScheme, 0) == 0;
  const std::optional<SplitAddress> split =
      SplitTcpAddress(has_scheme ? endpoint : kTcpScheme + endpoint);
  if (!split || split->host.empty())
    ThrowInvalid("endpoint '", endpoint, "' is not tcp://host:port");
  const std::string& host = split->host;
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']')
    return host.substr(1, host.size() - 2);
  return host;
}

}  // namespace dlrm::cluster

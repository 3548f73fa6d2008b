#include "engine/dist/roster.h"

#include <sstream>

#include "engine/dist/cluster_env.h"

namespace dlrm::dist {

std::vector<int32_t> RanksWithRole(const net::Roster& roster, net::Role role) {
  std::vector<int32_t> ranks;
  for (const net::PeerInfo& p : roster.peers())
    if (p.role() == role) ranks.push_back(p.rank());
  return ranks;
}

std::string DescribeRoster(const net::Roster& roster) {
  std::ostringstream os;
  for (int i = 0; i < roster.peers_size(); ++i) {
    const net::PeerInfo& p = roster.peers(i);
    os << (i ? ", " : "") << "rank " << p.rank() << " " << RoleName(p.role()) << " "
       << (p.address().empty() ? "-" : p.address());
  }
  return os.str();
}

std::string AdvertisedAddress(const std::string& bound, const std::string& peer_ip) {
  const std::string scheme = "tcp://";
  if (peer_ip.empty() || bound.compare(0, scheme.size(), scheme) != 0) return bound;
  const size_t colon = bound.rfind(':');
  if (colon == std::string::npos || colon < scheme.size()) return bound;
  const std::string host = bound.substr(scheme.size(), colon - scheme.size());
  if (host != "0.0.0.0" && host != "*" && host != "[::]" && host != "[::0]") return bound;
  const bool v6 = peer_ip.find(':') != std::string::npos;
  return scheme + (v6 ? "[" + peer_ip + "]" : peer_ip) + bound.substr(colon);
}

}  // namespace dlrm::dist

#include "engine/cluster/messages.h"

#include <sstream>
#include <string>
#include <utility>

#include "engine/config/dlrm.pb.h"
#include "engine/core/status.h"

namespace dlrm::cluster {
namespace {

bool IsPeerRole(Role role) { return role == ROLE_SERVER || role == ROLE_TRAINER; }

// The first rule `hello` breaks, or "".
std::string HelloProblem(const Hello& hello) {
  if (!hello.has_role()) return net::EnumFieldProblem(hello, Hello::kRoleFieldNumber, "HELLO role");
  if (!IsPeerRole(hello.role()))
    return StrCat("HELLO role ", Role_Name(hello.role()),
                  " is not a peer role (SERVER or TRAINER)");
  if (!hello.has_rank()) return "HELLO rank is missing";
  if (hello.rank() < 0) return StrCat("HELLO rank ", hello.rank(), " is negative");
  if (!hello.has_world_size()) return "HELLO world_size is missing";
  if (hello.world_size() < 1) return StrCat("HELLO world_size ", hello.world_size(), " is < 1");
  // Checked here, so that the coordinator never admits a config it cannot compare.
  if (hello.has_job_config() && !config::DlrmConfig().ParseFromString(hello.job_config()))
    return StrCat("HELLO job_config (", hello.job_config().size(),
                  " bytes) is not a valid dlrm.config.DlrmConfig");
  return "";
}

std::string RosterProblem(const Roster& roster) {
  if (!roster.has_world_size() || roster.world_size() < 1)
    return "ROSTER world_size is missing or < 1";
  if (roster.peers_size() != roster.world_size())
    return StrCat("ROSTER lists ", roster.peers_size(), " peers for world_size ",
                  roster.world_size());
  for (int i = 0; i < roster.peers_size(); ++i) {
    const PeerInfo& p = roster.peers(i);
    if (!p.has_rank() || p.rank() != i) return StrCat("ROSTER peer ", i, " has rank ", p.rank());
    if (!p.has_role())
      return net::EnumFieldProblem(p, PeerInfo::kRoleFieldNumber,
                                   StrCat("ROSTER peer ", i, " role"));
    if (!IsPeerRole(p.role())) return StrCat("ROSTER peer ", i, " has role ", Role_Name(p.role()));
    if (p.link().empty()) return StrCat("ROSTER peer ", i, " has no link");
  }
  return "";
}

void ExpectType(const net::Message& message, MessageType want) {
  RegisterMessageTypes();
  if (message.header.type() != want)
    Throw(StatusCode::kDataLoss, "expected ", MessageType_Name(want), ", got ",
          net::MessageTypeName(message.header.type()));
}

// A message of one of the cluster's types, registered.
net::Message Make(net::MessageType type) {
  RegisterMessageTypes();
  return net::MakeMessage(type);
}

// A message of `type` carrying `body`; kInvalidArgument when problem(body) names one.
template <typename Body>
net::Message MakeWithBody(MessageType type, const Body& body, std::string (*problem)(const Body&)) {
  const std::string why = problem(body);
  if (!why.empty()) ThrowInvalid("cannot send ", MessageType_Name(type), ": ", why);
  net::Message m = Make(type);
  net::SetBody(body, &m);
  return m;
}

// The body of a message of `type`; kDataLoss for another type, a body that does not parse,
// or one problem(body) finds fault with.
template <typename Body>
Body DecodeBody(const net::Message& message, MessageType type,
                std::string (*problem)(const Body&)) {
  ExpectType(message, type);
  Body body;
  net::ParseBody(message, &body);
  const std::string why = problem(body);
  if (!why.empty()) Throw(StatusCode::kDataLoss, "malformed message: ", why);
  return body;
}

}  // namespace

void RegisterMessageTypes() {
  [[maybe_unused]] static const bool once =
      net::RegisterMessageTypes("cluster", &MessageType_descriptor);
}

net::Message MakeHello(const Hello& hello) { return MakeWithBody(HELLO, hello, HelloProblem); }

Hello DecodeHello(const net::Message& message) {
  return DecodeBody<Hello>(message, HELLO, HelloProblem);
}

net::Message MakeRoster(const Roster& roster) {
  return MakeWithBody(ROSTER, roster, RosterProblem);
}

Roster DecodeRoster(const net::Message& message) {
  return DecodeBody<Roster>(message, ROSTER, RosterProblem);
}

net::Message MakeLeave(const std::string& failure) {
  net::Message m = Make(SHUTDOWN);
  if (failure.empty()) return m;
  Leave leave;
  leave.set_failure(failure);
  net::SetBody(leave, &m);
  return m;
}

std::string DecodeLeave(const net::Message& message) {
  ExpectType(message, SHUTDOWN);
  if (!message.header.has_body()) return "";
  Leave leave;
  net::ParseBody(message, &leave);
  return leave.failure();
}

net::Message MakeBarrier(int64_t generation) {
  if (generation < 0) ThrowInvalid("cannot send BARRIER: generation ", generation, " is negative");
  net::Message m = Make(BARRIER);
  m.header.set_step(generation);
  return m;
}

int64_t DecodeBarrier(const net::Message& message) {
  ExpectType(message, BARRIER);
  // (The transport refuses a negative step.)
  if (!message.header.has_step())
    Throw(StatusCode::kDataLoss, "malformed message: BARRIER has no step (its generation)");
  return message.header.step();
}

}  // namespace dlrm::cluster

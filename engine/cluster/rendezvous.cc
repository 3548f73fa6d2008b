#include "engine/cluster/rendezvous.h"

#include <utility>

#include "engine/cluster/messages.h"
#include "engine/core/log.h"

namespace dlrm::cluster {
namespace {

const ClusterEnv& CheckedPeerEnv(const ClusterEnv& env) {
  if (env.role != ROLE_SERVER && env.role != ROLE_TRAINER)
    ThrowInvalid("CoordinatorClient needs DLRM_ROLE=server or trainer, not ", RoleName(env.role));
  if (env.world_size < 1 || env.rank < 0 || env.rank >= env.world_size)
    ThrowInvalid("DLRM_RANK=", env.rank, " is out of range [0, DLRM_WORLD_SIZE=", env.world_size,
                 ")");
  return env;
}

}  // namespace

CoordinatorClient::CoordinatorClient(const net::Context& context, const ClusterEnv& env)
    : env_(CheckedPeerEnv(env)),
      client_(context, env.CoordinatorEndpoint(), env.Transport(), "coordinator", env.rank) {
  RegisterMessageTypes();
}

CoordinatorClient::~CoordinatorClient() {
  if (!joined_ || left_) return;
  try {
    Leave();
  } catch (const Error& e) {
    DLRM_LOG(kWarning) << RoleName(env_.role) << " rank " << env_.rank
                       << ": could not tell the coordinator it leaves: " << e.what();
  }
}

Roster CoordinatorClient::Rendezvous(const std::string& address) {
  Hello hello;
  hello.set_role(env_.role);
  hello.set_rank(env_.rank);
  hello.set_world_size(env_.world_size);
  hello.set_address(address);
  net::Message reply;
  try {
    reply = client_.Call(MakeHello(hello), std::chrono::milliseconds(env_.timeout_ms));
  } catch (const Error& e) {
    Throw(e.code(), "rendezvous of ", RoleName(env_.role), " rank ", env_.rank,
          " failed: ", e.what(),
          e.code() == StatusCode::kTimeout
              ? " (is the coordinator running at DLRM_COORDINATOR, and DLRM_SECRET the same?)"
              : "");
  }
  if (reply.header.type() != ROSTER)
    Throw(StatusCode::kNetwork, "the coordinator answered HELLO with ",
          net::MessageTypeName(reply.header.type()), " instead of ROSTER");
  const Roster roster = DecodeRoster(reply);
  if (roster.world_size() != env_.world_size || roster.peers(env_.rank).role() != env_.role)
    Throw(StatusCode::kNetwork, "the coordinator's roster (world size ", roster.world_size(),
          ") does not list this ", RoleName(env_.role), " as rank ", env_.rank);
  joined_ = true;
  return roster;
}

void CoordinatorClient::Barrier() { Barrier(std::chrono::milliseconds(env_.timeout_ms)); }

void CoordinatorClient::Barrier(std::chrono::milliseconds timeout) {
  const int64_t generation = next_barrier_++;
  net::Message reply = client_.Call(MakeBarrier(generation), timeout);
  if (reply.header.type() != BARRIER || DecodeBarrier(reply) != generation)
    Throw(StatusCode::kNetwork, "the coordinator answered barrier ", generation, " with ",
          net::DescribeMessage(reply));
}

void CoordinatorClient::Leave() {
  left_ = true;  // tried once: the destructor does not try again
  net::Message reply =
      client_.Call(net::MakeMessage(SHUTDOWN), std::chrono::milliseconds(env_.timeout_ms));
  if (reply.header.type() != SHUTDOWN)
    Throw(StatusCode::kNetwork, "the coordinator answered SHUTDOWN with ",
          net::DescribeMessage(reply));
}

}  // namespace dlrm::cluster

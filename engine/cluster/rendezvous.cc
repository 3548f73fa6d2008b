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

net::TransportOptions NotWatching(net::TransportOptions options) {
  options.abort = nullptr;
  return options;
}

}  // namespace

MemberTransport MakeMemberTransport(const ClusterEnv& env) {
  MemberTransport member{std::make_shared<net::AbortSignal>(), env.Transport()};
  member.options.routing_id = net::NewRoutingId();
  member.options.abort = member.abort;
  return member;
}

CoordinatorClient::CoordinatorClient(const net::Context& context, const ClusterEnv& env,
                                     const MemberTransport& member)
    : env_(CheckedPeerEnv(env)),
      liveness_(LivenessFor(std::chrono::milliseconds(env.timeout_ms))),
      abort_(member.abort),
      // Not watching abort_: this peer still leaves after the job is over.
      client_(context, env.CoordinatorEndpoint(), NotWatching(member.options), "coordinator",
              env.rank) {
  if (!abort_) ThrowInvalid("CoordinatorClient: the member's abort signal is null");
  RegisterMessageTypes();
}

CoordinatorClient::~CoordinatorClient() {
  StopBeating();
  if (!joined_ || left_ || coordinator_gone_) return;
  LeaveFailed("it ended without finishing (an error, or its host gave up; its log says which)");
}

void CoordinatorClient::LeaveFailed(const std::string& failure) {
  try {
    SendLeave(failure);
  } catch (const Error& e) {
    DLRM_LOG(kWarning) << RoleName(env_.role) << " rank " << env_.rank
                       << ": could not tell the coordinator it leaves: " << e.what();
  }
}

void CoordinatorClient::StartBeating() {
  beat_thread_ = std::thread([this] { BeatLoop(); });
}

void CoordinatorClient::StopBeating() {
  {
    std::lock_guard<std::mutex> lock(beat_mu_);
    stop_beating_ = true;
  }
  beat_cv_.notify_all();
  if (beat_thread_.joinable()) beat_thread_.join();
}

void CoordinatorClient::BeatLoop() {
  std::unique_lock<std::mutex> lock(beat_mu_);
  while (!beat_cv_.wait_for(lock, liveness_.beat, [this] { return stop_beating_; })) {
    lock.unlock();
    const bool job_goes_on = Beat();
    lock.lock();
    if (!job_goes_on) return;
  }
}

bool CoordinatorClient::Beat() {
  net::Message reply;
  try {
    reply = client_.WaitReply(client_.Submit(net::MakeMessage(HEARTBEAT)), liveness_.silence);
  } catch (const Error& e) {
    if (e.code() != StatusCode::kTimeout) {  // the transport itself failed
      abort_->Raise(e.code(), StrCat("the link to the coordinator failed: ", e.what()));
      return false;
    }
    coordinator_gone_ = true;
    abort_->Raise(StatusCode::kNetwork,
                  StrCat("the coordinator at ", env_.CoordinatorEndpoint(),
                         " is gone: it has not answered a heartbeat for ",
                         liveness_.silence.count(), " ms (its process died or its host is down)"));
    return false;
  }
  // The job is over (a peer died or failed). Beating goes on until this peer leaves, so
  // that the coordinator can tell a peer still winding down from a dead one.
  if (reply.header.type() == net::ERROR)
    abort_->Raise(static_cast<StatusCode>(reply.header.error_code()), reply.header.error_message());
  return true;
}

Roster CoordinatorClient::Rendezvous(const std::string& address, const std::string& job_config) {
  Hello hello;
  hello.set_role(env_.role);
  hello.set_rank(env_.rank);
  hello.set_world_size(env_.world_size);
  hello.set_address(address);
  if (!job_config.empty()) hello.set_job_config(job_config);
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
  StartBeating();
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

void CoordinatorClient::Leave() { SendLeave(""); }

void CoordinatorClient::SendLeave(const std::string& failure) {
  if (left_) return;
  left_ = true;  // tried once: the destructor does not try again
  StopBeating();
  if (coordinator_gone_) Throw(StatusCode::kNetwork, "cannot leave the job: ", abort_->reason());
  net::Message reply = client_.Call(MakeLeave(failure), liveness_.silence);
  if (reply.header.type() != SHUTDOWN)
    Throw(StatusCode::kNetwork, "the coordinator answered SHUTDOWN with ",
          net::DescribeMessage(reply));
}

}  // namespace dlrm::cluster

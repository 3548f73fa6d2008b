#include "engine/cluster/coordinator.h"

#include <algorithm>
#include <sstream>
#include <utility>

#include "engine/cluster/job_config.h"
#include "engine/cluster/roster.h"
#include "engine/core/log.h"

namespace dlrm::cluster {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

constexpr milliseconds kPollInterval{100};
// The most of a config difference an ERROR carries (a whole other model can differ in
// hundreds of fields; the first ones say what is wrong).
constexpr size_t kMaxConfigReport = 2000;

std::string RankList(const std::vector<int32_t>& ranks) {
  std::ostringstream os;
  const size_t shown = std::min<size_t>(ranks.size(), 20);
  for (size_t i = 0; i < shown; ++i) os << (i ? ", " : "") << ranks[i];
  if (shown < ranks.size()) os << " and " << ranks.size() - shown << " more";
  return os.str();
}

int32_t CheckedWorldSize(int32_t world_size) {
  if (world_size < 1 || world_size > kMaxWorldSize)
    ThrowInvalid("coordinator world_size ", world_size, " is out of range [1, ", kMaxWorldSize,
                 "]");
  return world_size;
}

}  // namespace

Coordinator::Coordinator(const net::Context& context, int32_t world_size,
                         const std::string& bind_address, const net::TransportOptions& options)
    : world_size_(CheckedWorldSize(world_size)),
      endpoint_(context, net::Endpoint::kListen, bind_address, options, "coordinator"),
      hello_links_(std::vector<std::string>(static_cast<size_t>(world_size))),
      left_(world_size, false),
      dead_(world_size, false) {
  RegisterMessageTypes();
}

template <typename Decode>
auto Coordinator::DecodeOrReply(const net::Received& r, Decode decode)
    -> std::optional<decltype(decode(r.message))> {
  try {
    return decode(r.message);
  } catch (const Error& e) {
    endpoint_.ReplyError(r, e.code(),
                         "the coordinator rejected the message: " + std::string(e.what()));
    return std::nullopt;
  }
}

Roster Coordinator::Rendezvous(milliseconds timeout) {
  if (roster_) Throw(StatusCode::kFailedPrecondition, "the rendezvous has already completed");
  timeout_ = timeout;
  const auto deadline = Clock::now() + timeout;
  JoinedPeers joined(world_size_);
  int32_t count = 0;
  while (count < world_size_) {
    const auto left = std::chrono::ceil<milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) {
      std::vector<int32_t> missing;
      for (int32_t r = 0; r < world_size_; ++r)
        if (!joined[r]) missing.push_back(r);
      std::ostringstream why;
      why << "rendezvous timed out after " << timeout.count() << " ms: " << count << " of "
          << world_size_ << " peers said HELLO to the coordinator at " << address()
          << "; missing ranks " << RankList(missing);
      for (auto& j : joined)
        if (j) endpoint_.ReplyError(j->request, StatusCode::kTimeout, why.str());
      Throw(StatusCode::kTimeout, why.str());
    }
    if (stop_) Throw(StatusCode::kCancelled, "the coordinator's rendezvous was stopped");
    std::optional<net::Received> r = endpoint_.TryReceive(std::min(left, kPollInterval));
    if (r) HandleDuringRendezvous(std::move(*r), joined, count);
  }
  roster_ = MakeJobRoster(joined);
  const net::Message reply = MakeRoster(*roster_);
  for (auto& j : joined) endpoint_.Reply(j->request, reply);
  liveness_ = LivenessFor(timeout);
  last_heard_.assign(world_size_, Clock::now());
  DLRM_LOG(kInfo) << "coordinator " << address()
                  << ": rendezvous complete: " << DescribeRoster(*roster_);
  return *roster_;
}

Roster Coordinator::MakeJobRoster(const JoinedPeers& joined) const {
  Roster roster;
  roster.set_world_size(world_size_);
  for (int32_t rank = 0; rank < world_size_; ++rank) {
    const Joined& j = *joined[rank];
    PeerInfo* p = roster.add_peers();
    p->set_rank(rank);
    p->set_role(j.hello.role());
    p->set_address(AdvertisedAddress(j.hello.address(), j.request.from.address));
    p->set_link(j.request.from.routing_id);
  }
  return roster;
}

void Coordinator::HandleDuringRendezvous(net::Received r, JoinedPeers& joined, int32_t& count) {
  const net::Header& h = r.message.header;
  if (h.type() == HEARTBEAT) {
    endpoint_.Reply(r, net::MakeMessage(HEARTBEAT));
    return;
  }
  if (h.type() != HELLO) {
    endpoint_.ReplyError(r, StatusCode::kFailedPrecondition,
                         "the coordinator is still waiting for peers to say HELLO and cannot "
                         "handle " +
                             net::MessageTypeName(h.type()) + " yet");
    return;
  }
  std::optional<Hello> hello = DecodeOrReply(r, DecodeHello);
  if (!hello) return;
  const std::string problem = AdmissionProblem(*hello, r, joined);
  if (!problem.empty()) {
    endpoint_.ReplyError(r, StatusCode::kInvalidArgument, problem);
    return;
  }
  const int32_t rank = hello->rank();
  // Taken already only by this same peer saying HELLO again (AdmissionProblem).
  const bool again = joined[rank].has_value();
  joined[rank] = Joined{std::move(r), std::move(*hello)};
  if (again) return;
  hello_links_.Set(rank, joined[rank]->request.from.routing_id);
  registered_ = ++count;
}

std::string Coordinator::AdmissionProblem(const Hello& hello, const net::Received& r,
                                          const JoinedPeers& joined) const {
  if (hello.world_size() != world_size_)
    return StrCat("HELLO from rank ", hello.rank(), " says DLRM_WORLD_SIZE=", hello.world_size(),
                  " but the coordinator has ", world_size_);
  if (hello.rank() >= world_size_)
    return StrCat("HELLO rank ", hello.rank(), " is out of range [0, ", world_size_, ")");
  const std::optional<Joined>& slot = joined[hello.rank()];
  if (slot && slot->request.from.routing_id != r.from.routing_id)
    return StrCat("rank ", hello.rank(), " is already taken by a ", RoleName(slot->hello.role()),
                  " (address '", slot->hello.address(), "', connected from ",
                  slot->request.from.address, "); is DLRM_RANK set twice?");
  return ConfigProblem(hello, joined);
}

std::string Coordinator::ConfigProblem(const Hello& hello, const JoinedPeers& joined) const {
  if (!hello.has_job_config()) return "";
  for (int32_t rank = 0; rank < world_size_; ++rank) {
    const std::optional<Joined>& peer = joined[rank];
    if (!peer || rank == hello.rank() || !peer->hello.has_job_config()) continue;
    std::string diff = JobConfigDifference(peer->hello.job_config(), hello.job_config());
    if (diff.empty()) return "";  // the admitted peers' configs agree with each other
    if (diff.size() > kMaxConfigReport) diff = diff.substr(0, kMaxConfigReport) + "...";
    return StrCat("the config of ", RoleName(hello.role()), " rank ", hello.rank(),
                  " differs from that of ", RoleName(peer->hello.role()), " rank ", rank,
                  " (every peer of a job needs the same model, optimizers, seed, sharding "
                  "and distributed settings; rank ",
                  rank, "'s value first):\n", diff);
  }
  return "";
}

void Coordinator::Serve() {
  if (!roster_)
    Throw(StatusCode::kFailedPrecondition, "Coordinator::Serve before a successful Rendezvous");
  while (!stop_ && num_left_ + num_dead_ < world_size_) {
    // A peer that learns of another's death by a wait of its own leaves up to
    // kAllGatherTimeouts after the dead one's partners did (cluster_env.h).
    if (first_left_ && Clock::now() - *first_left_ > kLeaveTimeouts * timeout_) ThrowLeaveTimeout();
    std::optional<net::Received> r = endpoint_.TryReceive(std::min(kPollInterval, liveness_.beat));
    if (r) Handle(std::move(*r));
    FindDeadPeers();
  }
  if (JobOver().empty()) return;
  if (num_dead_ > 1) {
    std::vector<int32_t> dead;
    for (int32_t p = 0; p < world_size_; ++p)
      if (dead_[p]) dead.push_back(p);
    Throw(job_over_code_, JobOver(), "; ranks ", RankList(dead), " died in all");
  }
  Throw(job_over_code_, JobOver());
}

void Coordinator::EndJob(int32_t rank, StatusCode code, const std::string& why) {
  DLRM_LOG(kError) << "coordinator: " << why;
  if (job_over_.empty()) {
    job_over_ = why;
    job_over_code_ = code;
  }
  FailBarriersWaitingFor(rank, why);
}

void Coordinator::ThrowLeaveTimeout() const {
  std::vector<int32_t> staying;
  for (int32_t r = 0; r < world_size_; ++r)
    if (!left_[r] && !dead_[r]) staying.push_back(r);
  Throw(StatusCode::kTimeout, "the job is ending but rank(s) ", RankList(staying),
        " did not leave within ", kLeaveTimeouts * timeout_.count(),
        " ms after the first peer left (died, or abandoned the job without finishing)",
        JobOver().empty() ? "" : "; the job ended because " + JobOver());
}

void Coordinator::Heard(const net::Received& r) {
  if (const std::optional<int32_t> rank = hello_links_.RankOf(r)) last_heard_[*rank] = Clock::now();
}

void Coordinator::FindDeadPeers() {
  const auto now = Clock::now();
  for (int32_t rank = 0; rank < world_size_; ++rank) {
    if (left_[rank] || dead_[rank] || now - last_heard_[rank] <= liveness_.silence) continue;
    dead_[rank] = true;
    ++num_dead_;
    if (!first_left_) first_left_ = now;
    EndJob(rank, StatusCode::kNetwork,
           StrCat(PeerName(*roster_, rank), " is gone: the coordinator has heard nothing from it ",
                  "for ", liveness_.silence.count(), " ms (its process died or its host is down)"));
  }
}

std::optional<int32_t> Coordinator::SenderRank(const net::Received& r) {
  const net::Header& h = r.message.header;
  if (!hello_links_.NamesARank(r)) {
    endpoint_.ReplyError(r, StatusCode::kInvalidArgument,
                         net::MessageTypeName(h.type()) + " needs a sender_rank in [0, " +
                             std::to_string(world_size_) + ")");
    return std::nullopt;
  }
  const std::optional<int32_t> rank = hello_links_.RankOf(r);
  if (!rank)
    endpoint_.ReplyError(r, StatusCode::kInvalidArgument,
                         net::MessageTypeName(h.type()) + " claims rank " +
                             std::to_string(h.sender_rank()) +
                             " but does not come from the connection that said its HELLO");
  return rank;
}

void Coordinator::Handle(net::Received r) {
  Heard(r);
  const net::Header& h = r.message.header;
  switch (h.type()) {
    case HELLO: {
      const std::optional<Hello> hello = DecodeOrReply(r, DecodeHello);
      if (!hello) return;
      const int32_t rank = hello->rank();
      if (rank < world_size_ && hello_links_.link(rank) == r.from.routing_id) {
        endpoint_.Reply(r, MakeRoster(*roster_));
      } else {
        endpoint_.ReplyError(r, StatusCode::kFailedPrecondition,
                             "the rendezvous of " + std::to_string(world_size_) +
                                 " peers is complete; rank " + std::to_string(rank) +
                                 " cannot join now");
      }
      return;
    }
    case BARRIER: HandleBarrier(std::move(r)); return;
    case SHUTDOWN: HandleShutdown(std::move(r)); return;
    case HEARTBEAT:
      if (JobOver().empty()) {
        endpoint_.Reply(r, net::MakeMessage(HEARTBEAT));
      } else {
        endpoint_.ReplyError(r, job_over_code_, JobOver());
      }
      return;
    default:
      endpoint_.ReplyError(r, StatusCode::kInvalidArgument,
                           "the coordinator does not handle " + net::MessageTypeName(h.type()));
  }
}

void Coordinator::HandleBarrier(net::Received r) {
  const std::optional<int32_t> rank = SenderRank(r);
  if (!rank) return;
  const std::optional<int64_t> generation = DecodeOrReply(r, DecodeBarrier);
  if (!generation) return;
  if (!JobOver().empty()) {
    endpoint_.ReplyError(r, job_over_code_, JobOver());
    return;
  }
  for (int32_t p = 0; p < world_size_; ++p) {
    if (left_[p]) {
      endpoint_.ReplyError(r, StatusCode::kFailedPrecondition,
                           "barrier " + std::to_string(*generation) + " cannot complete: rank " +
                               std::to_string(p) + " has left");
      return;
    }
  }
  auto& waiting = barriers_[*generation];
  if (waiting.count(*rank)) {
    endpoint_.ReplyError(r, StatusCode::kInvalidArgument,
                         "rank " + std::to_string(*rank) + " entered barrier " +
                             std::to_string(*generation) + " twice");
    return;
  }
  waiting.emplace(*rank, std::move(r));
  if (static_cast<int32_t>(waiting.size()) < world_size_) return;
  const net::Message release = MakeBarrier(*generation);
  for (auto& [p, waiter] : waiting) endpoint_.Reply(waiter, release);
  barriers_.erase(*generation);
}

void Coordinator::HandleShutdown(net::Received r) {
  const std::optional<int32_t> rank = SenderRank(r);
  if (!rank) return;
  const std::optional<std::string> failure = DecodeOrReply(r, DecodeLeave);
  if (!failure) return;
  // A peer taken for dead that was only late stays dead; one that leaves twice, left.
  if (left_[*rank] || dead_[*rank]) {
    endpoint_.Reply(r, net::MakeMessage(SHUTDOWN));
    return;
  }
  left_[*rank] = true;
  ++num_left_;
  if (!first_left_) first_left_ = Clock::now();
  endpoint_.Reply(r, net::MakeMessage(SHUTDOWN));
  if (!failure->empty()) {
    EndJob(*rank, StatusCode::kCancelled, PeerName(*roster_, *rank) + " failed: " + *failure);
  } else {
    FailBarriersWaitingFor(*rank, "rank " + std::to_string(*rank) + " has left");
  }
}

void Coordinator::FailBarriersWaitingFor(int32_t rank, const std::string& why) {
  for (auto it = barriers_.begin(); it != barriers_.end();) {
    if (it->second.count(rank)) {
      ++it;
      continue;
    }
    for (auto& [p, waiter] : it->second)
      endpoint_.ReplyError(waiter, StatusCode::kFailedPrecondition,
                           "barrier " + std::to_string(it->first) + " cannot complete: " + why);
    it = barriers_.erase(it);
  }
}

void RunCoordinator(const net::Context& context, const ClusterEnv& env) {
  if (env.role != ROLE_COORDINATOR)
    ThrowInvalid("RunCoordinator with DLRM_ROLE=", RoleName(env.role));
  Coordinator coordinator(context, env.world_size, env.CoordinatorBindEndpoint(), env.Transport());
  coordinator.Rendezvous(milliseconds(env.timeout_ms));
  coordinator.Serve();
}

}  // namespace dlrm::cluster

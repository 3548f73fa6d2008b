#include "engine/ps/server.h"

#include <chrono>
#include <new>
#include <utility>

#include "engine/checkpoint/sharded_checkpoint.h"
#include "engine/cluster/messages.h"
#include "engine/core/log.h"
#include "engine/core/status.h"
#include "engine/ps/messages.h"
#include "engine/ps/shard_store_file.h"

namespace dlrm::ps {

EmbeddingServer::EmbeddingServer(net::Endpoint* endpoint, ShardOwner* owner, int32_t index,
                                 std::vector<std::string> trainer_links,
                                 std::chrono::milliseconds trainer_timeout,
                                 config::TableConfig::Precision wire, int64_t max_message_bytes)
    : endpoint_(endpoint),
      owner_(owner),
      index_(index),
      trainer_links_(std::move(trainer_links)),
      num_trainers_(trainer_links_.size()),
      trainer_timeout_(trainer_timeout),
      wire_(wire),
      max_message_bytes_(max_message_bytes) {
  RegisterMessageTypes();
  if (endpoint_ == nullptr || owner_ == nullptr)
    ThrowInvalid("embedding server: endpoint and owner are required");
  if (endpoint_->kind() != net::Endpoint::kListen)
    ThrowInvalid("embedding server: the endpoint must listen");
  owner_->set_on_applied([this] { ServeParked(); });
}

EmbeddingServer::~EmbeddingServer() { owner_->set_on_applied(nullptr); }

void EmbeddingServer::Stop() { stop_ = true; }

int64_t EmbeddingServer::lookups_served() const {
  std::lock_guard<std::mutex> lock(parked_mu_);
  return lookups_served_;
}

int64_t EmbeddingServer::messages_dropped() const {
  std::lock_guard<std::mutex> lock(parked_mu_);
  return messages_dropped_;
}

std::string EmbeddingServer::last_drop_reason() const {
  std::lock_guard<std::mutex> lock(parked_mu_);
  return last_drop_reason_;
}

void EmbeddingServer::Serve() {
  using Clock = std::chrono::steady_clock;
  last_heard_.assign(num_trainers_, Clock::now());
  while (!stop_ && static_cast<int32_t>(trainers_done_.size()) < num_trainers_) {
    std::optional<net::Received> r = endpoint_->TryReceive(std::chrono::milliseconds(100));
    const auto now = Clock::now();
    const std::optional<int32_t> trainer = r ? SendingTrainer(*r) : std::nullopt;
    // The message just received counts before anyone is judged silent.
    if (trainer) last_heard_[*trainer] = now;
    for (int32_t t = 0; t < num_trainers_; ++t) {
      if (trainers_done_.count(t) == 0 && now - last_heard_[t] > trainer_timeout_)
        Throw(StatusCode::kTimeout, "server ", index_, ": trainer ", t, " has sent nothing for ",
              trainer_timeout_.count(), " ms (it died, or the network is down); giving up");
    }
    if (!r) continue;
    if (!trainer) {
      const std::string reason = net::DescribeMessage(r->message) +
                                 ": not from the connection of the trainer it names (forged, or "
                                 "a peer of another job)";
      Drop(reason);
      endpoint_->ReplyError(*r, StatusCode::kInvalidArgument,
                            "server " + std::to_string(index_) + " dropped " + reason);
      continue;
    }
    try {
      Handle(std::move(*r));
    } catch (const Error& e) {
      // Handle answers what it can; this is for a reply that could not even be formed.
      DLRM_LOG(kWarning) << "server " << index_ << ": " << e.what();
    }
  }
}

std::optional<int32_t> EmbeddingServer::SendingTrainer(const net::Received& r) const {
  return trainer_links_.RankOf(r);
}

void EmbeddingServer::Drop(const std::string& reason) {
  int64_t dropped;
  {
    std::lock_guard<std::mutex> lock(parked_mu_);
    dropped = ++messages_dropped_;
    last_drop_reason_ = reason;
  }
  if (ShouldLogOccurrence(dropped))
    DLRM_LOG(kError) << "server " << index_ << ": dropped " << reason << " (" << dropped
                     << " dropped so far)";
}

void EmbeddingServer::Handle(net::Received r) {
  switch (r.message.header.type()) {
    case LOOKUP: HandleLookup(std::move(r)); return;
    case UPDATE: HandleUpdate(r); return;
    case FLUSH:
    case SAVE: HandleWait(std::move(r)); return;
    case cluster::SHUTDOWN:  // Serve checked the sender (SendingTrainer)
      trainers_done_.insert(r.message.header.sender_rank());
      endpoint_->Reply(r, net::MakeMessage(cluster::SHUTDOWN));
      return;
    case cluster::HEARTBEAT:
      // Trainers' periodic heartbeats carry no request id and want no answer.
      if (r.message.header.request_id() != 0)
        endpoint_->Reply(r, net::MakeMessage(cluster::HEARTBEAT));
      return;
    default:
      endpoint_->ReplyError(
          r, StatusCode::kInvalidArgument,
          "an embedding server does not handle " + net::MessageTypeName(r.message.header.type()));
  }
}

void EmbeddingServer::HandleLookup(net::Received r) {
  ParkedLookup lookup;
  try {
    lookup.step = RequiredStep(r.message);
    lookup.rows = DecodeLookup(r.message);
    owner_->ValidateLookup(lookup.rows, lookup.step);
    CheckAnswerFits(lookup.rows);
  } catch (const Error& e) {
    endpoint_->ReplyError(r, e.code(), "server " + std::to_string(index_) + ": " + e.what());
    return;
  }
  lookup.request = std::move(r);
  std::lock_guard<std::mutex> lock(parked_mu_);
  if (!TryAnswer(lookup)) parked_lookups_.push_back(std::move(lookup));
}

void EmbeddingServer::CheckAnswerFits(const std::vector<ShardRows>& request) const {
  // The answer's values at most (ids were checked against the LOOKUP's own size), and room
  // for the header and the counts.
  int64_t values = 0;
  for (const ShardRows& r : request)
    values += static_cast<int64_t>(r.ids.size()) * owner_->store().shard_table(r.shard).dim();
  const int64_t bytes = values * (IsHalf(wire_) ? 2 : 4) +
                        8 * static_cast<int64_t>(request.size()) + kMessageHeaderRoomBytes;
  if (bytes > max_message_bytes_)
    ThrowInvalid("the answer to this lookup would take ", bytes,
                 " bytes, more than one message may carry (", max_message_bytes_,
                 "): look up fewer rows at once");
}

bool EmbeddingServer::TryAnswer(ParkedLookup& lookup) {
  try {
    if (!owner_->Servable(lookup.step)) return false;
    owner_->ReadRows(lookup.step, &lookup.rows);
    endpoint_->Reply(lookup.request, EncodeLookupReply(lookup.rows, wire_));
    ++lookups_served_;
  } catch (const Error& e) {
    endpoint_->ReplyError(lookup.request, e.code(), e.what());
  } catch (const std::bad_alloc&) {  // the server goes on: only this answer is lost
    endpoint_->ReplyError(
        lookup.request, StatusCode::kResourceExhausted,
        "server " + std::to_string(index_) + ": out of memory answering a lookup");
  }
  return true;
}

void EmbeddingServer::HandleUpdate(const net::Received& r) {
  try {
    UpdateMessage u = DecodeUpdate(r.message);
    owner_->AddUpdate(u.rank, u.step, u.lr, std::move(u.part));
  } catch (const Error& e) {
    // Updates are not answered, and the owner is as before (AddUpdate validates first).
    Drop("bad UPDATE (" + net::DescribeMessage(r.message) + "): " + e.what());
  }
}

void EmbeddingServer::HandleWait(net::Received r) {
  if (!r.message.header.has_step()) {
    endpoint_->ReplyError(r, StatusCode::kInvalidArgument,
                          net::MessageTypeName(r.message.header.type()) + " needs a step");
    return;
  }
  std::lock_guard<std::mutex> lock(parked_mu_);
  if (!TryAnswerWait(r)) parked_waits_.push_back(std::move(r));
}

bool EmbeddingServer::TryAnswerWait(const net::Received& r) {
  const int64_t step = r.message.header.step();
  try {
    if (!owner_->Applied(step)) return false;
    if (r.message.header.type() == SAVE) {
      Save(r, step);
    } else {
      endpoint_->Reply(r, StepMessage(FLUSH_ACK, step));
    }
  } catch (const Error& e) {
    endpoint_->ReplyError(r, e.code(), e.what());
  }
  return true;
}

void EmbeddingServer::Save(const net::Received& r, int64_t step) {
  const std::string& dir = r.message.header.body();
  if (dir.empty()) ThrowInvalid("SAVE names no directory");
  owner_->Frozen([&](int64_t applied) {
    // Trainers stop sending updates until every server has saved, so the shards are
    // exactly as of `step`; anything else is a protocol error, not a checkpoint.
    if (applied != step && !owner_->store().features().empty())
      Throw(StatusCode::kFailedPrecondition, "server ", index_, " has applied step ", applied,
            ", cannot save a checkpoint of step ", step);
    SaveShardStore(owner_->store(), index_, step, dir + "/" + checkpoint::ServerShardFile(index_));
  });
  DLRM_LOG(kInfo) << "server " << index_ << ": saved step " << step << " to " << dir;
  endpoint_->Reply(r, StepMessage(SAVE_ACK, step));
}

void EmbeddingServer::ServeParked() {
  std::lock_guard<std::mutex> lock(parked_mu_);
  for (auto it = parked_lookups_.begin(); it != parked_lookups_.end();)
    it = TryAnswer(*it) ? parked_lookups_.erase(it) : std::next(it);
  for (auto it = parked_waits_.begin(); it != parked_waits_.end();)
    it = TryAnswerWait(*it) ? parked_waits_.erase(it) : std::next(it);
}

}  // namespace dlrm::ps

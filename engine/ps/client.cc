#include "engine/ps/client.h"

#include <algorithm>
#include <utility>

#include "engine/cluster/messages.h"
#include "engine/core/status.h"
#include "engine/ps/messages.h"

namespace dlrm::ps {
namespace {

class RemoteLookup : public PendingLookup {
 public:
  RemoteLookup(net::Client* server, uint64_t id, std::vector<ShardRows> request,
               std::chrono::milliseconds timeout, config::TableConfig::Precision wire)
      : server_(server), id_(id), request_(std::move(request)), timeout_(timeout), wire_(wire) {}
  // Not waited for (a step that failed before using it): drop the answer when it comes.
  ~RemoteLookup() override {
    if (!waited_) server_->Abandon(id_);
  }

  std::vector<ShardRows> Wait() override {
    waited_ = true;
    const net::Message reply = server_->Wait(id_, timeout_);
    try {
      DecodeLookupReply(reply, &request_, wire_);
    } catch (const Error& e) {
      Throw(e.code(), server_->endpoint().name(), ": ", e.what());
    }
    return std::move(request_);
  }

 private:
  net::Client* server_;
  uint64_t id_;
  std::vector<ShardRows> request_;
  std::chrono::milliseconds timeout_;
  config::TableConfig::Precision wire_;
  bool waited_ = false;
};

}  // namespace

RemoteEmbeddingService::RemoteEmbeddingService(const net::Context& context,
                                               const std::vector<std::string>& server_addresses,
                                               int32_t rank, const net::TransportOptions& options,
                                               std::chrono::milliseconds timeout,
                                               config::TableConfig::Precision wire)
    : rank_(rank),
      timeout_(timeout),
      wire_(wire),
      max_update_bytes_(options.max_message_bytes -
                        std::min(kMessageHeaderRoomBytes, options.max_message_bytes / 2)) {
  RegisterMessageTypes();
  if (rank_ < 0) ThrowInvalid("remote embedding service: rank must be >= 0, got ", rank);
  for (size_t i = 0; i < server_addresses.size(); ++i)
    servers_.push_back(std::make_unique<net::Client>(context, server_addresses[i], options,
                                                     "server " + std::to_string(i), rank_));
  heartbeat_ = std::thread([this] { HeartbeatLoop(); });
}

RemoteEmbeddingService::~RemoteEmbeddingService() {
  {
    std::lock_guard<std::mutex> lock(heartbeat_mu_);
    stopping_ = true;
  }
  heartbeat_cv_.notify_all();
  heartbeat_.join();
}

void RemoteEmbeddingService::HeartbeatLoop() {
  const auto interval = std::max(timeout_ / 4, std::chrono::milliseconds(1));
  std::unique_lock<std::mutex> lock(heartbeat_mu_);
  while (!heartbeat_cv_.wait_for(lock, interval, [&] { return stopping_; })) {
    for (auto& server : servers_) {
      // No request id: the server does not answer it.
      net::Message beat = net::MakeMessage(cluster::HEARTBEAT);
      beat.header.set_sender_rank(rank_);
      try {
        server->endpoint().Send(std::move(beat));
      } catch (const Error&) {
        // A transport that failed shows up in the next real request.
      }
    }
  }
}

net::Client& RemoteEmbeddingService::At(int32_t owner) {
  if (owner < 0 || owner >= num_servers())
    ThrowInvalid("embedding service: no server ", owner, " (", num_servers(), " servers)");
  return *servers_[owner];
}

std::unique_ptr<PendingLookup> RemoteEmbeddingService::SubmitLookup(
    int32_t owner, int64_t step, std::vector<ShardRows> request) {
  net::Client& server = At(owner);
  if (step < 1) ThrowInvalid("embedding service: lookup for step ", step, " (steps start at 1)");
  const uint64_t id = server.Submit(EncodeLookup(step, request));
  return std::make_unique<RemoteLookup>(&server, id, std::move(request), timeout_, wire_);
}

void RemoteEmbeddingService::Update(int32_t owner, int32_t rank, int64_t step, float lr,
                                    std::vector<FeatureUpdate> part) {
  net::Client& server = At(owner);
  if (rank != rank_)
    ThrowInvalid("embedding service: this trainer is rank ", rank_, ", not ", rank);
  UpdateMessage u;
  u.rank = rank;
  u.step = step;
  u.lr = lr;
  u.part = std::move(part);
  u.wire = wire_;
  server.endpoint().Send(EncodeUpdate(u));
}

void RemoteEmbeddingService::CallAll(net::MessageType type, int64_t step, const std::string& body) {
  std::vector<uint64_t> ids;
  for (auto& server : servers_) ids.push_back(server->Submit(StepMessage(type, step, body)));
  size_t waited = 0;
  try {
    for (; waited < servers_.size(); ++waited) servers_[waited]->Wait(ids[waited], timeout_);
  } catch (...) {
    for (size_t i = waited + 1; i < servers_.size(); ++i) servers_[i]->Abandon(ids[i]);
    throw;
  }
}

void RemoteEmbeddingService::WaitUntilApplied(int64_t step) { CallAll(FLUSH, step, ""); }

void RemoteEmbeddingService::SaveShards(int64_t step, const std::string& dir) {
  if (dir.empty()) ThrowInvalid("checkpoint directory is empty");
  CallAll(SAVE, step, dir);
}

void RemoteEmbeddingService::Shutdown() { CallAll(cluster::SHUTDOWN, 0, ""); }

}  // namespace dlrm::ps

// The trainer's side of the embedding servers: the EmbeddingService calls as messages to
// server processes (server.h), one connection per server. Lookups are
// pipelined (any number outstanding per server); updates are sent without waiting.
//
// Every wait is bounded by `timeout`: a server that died or hangs makes the call fail
// with kTimeout naming the server, its address and the request, never hang. The other
// way round, a background thread sends each server a HEARTBEAT every timeout / 4, so a
// server can tell a trainer that pauses (a host preparing data, evaluating) from one
// that died, and exits when a trainer has been silent for the timeout.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "engine/net/client.h"
#include "engine/ps/service.h"

namespace dlrm::ps {

class RemoteEmbeddingService : public EmbeddingService {
 public:
  // server_addresses[i]: where server i listens. rank: this trainer's index among the
  // trainers (the rank its update parts carry). wire: the precision rows and gradients
  // travel in (WireValuePrecision of the job's DistributedConfig).
  RemoteEmbeddingService(const net::Context& context,
                         const std::vector<std::string>& server_addresses, int32_t rank,
                         const net::TransportOptions& options, std::chrono::milliseconds timeout,
                         config::TableConfig::Precision wire = config::TableConfig::FP32);
  ~RemoteEmbeddingService() override;

  std::unique_ptr<PendingLookup> SubmitLookup(int32_t owner, int64_t step,
                                              std::vector<ShardRows> request) override;
  void Update(int32_t owner, int32_t rank, int64_t step, float lr,
              std::vector<FeatureUpdate> part) override;
  void WaitUntilApplied(int64_t step) override;
  // The transport's max_message_bytes less room for the UPDATE's header and learning rate.
  int64_t max_update_bytes() const override { return max_update_bytes_; }

  // Every server writes its shards as of `step` into `dir` (a directory all of them can
  // reach) once that step is applied; returns when all have.
  void SaveShards(int64_t step, const std::string& dir);
  // Tells every server this trainer is done; a server exits when all trainers are.
  void Shutdown();

  int32_t num_servers() const { return static_cast<int32_t>(servers_.size()); }

 private:
  net::Client& At(int32_t owner);
  // Sends the request to every server, then waits for every answer.
  void CallAll(net::MessageType type, int64_t step, const std::string& body);

  void HeartbeatLoop();

  const int32_t rank_;
  const std::chrono::milliseconds timeout_;
  const config::TableConfig::Precision wire_;
  const int64_t max_update_bytes_;
  std::vector<std::unique_ptr<net::Client>> servers_;
  std::mutex heartbeat_mu_;
  std::condition_variable heartbeat_cv_;
  bool stopping_ = false;
  std::thread heartbeat_;
};

}  // namespace dlrm::ps

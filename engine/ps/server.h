// An embedding server: serves one ShardOwner (its shards of the plan) to the trainers
// over a listening endpoint. Owner computes: lookups are answered from the shards, and
// the trainers' update parts are applied here (shard_owner.h has the consistency rule).
//
// A lookup that may not be served yet (its step needs updates still in flight) is parked
// and answered the moment the owner applies the step it needs, from the applier thread,
// so sync mode pays no polling delay. FLUSH and SAVE wait the same way.
//
// Whatever a peer sends, the server keeps serving: a bad request gets an ERROR naming
// the problem, and an UPDATE that fails validation (undecodable, a step the consistency
// rule forbids, a part sent twice) is dropped, logged and counted, changing nothing
// (issue 17: one forged message used to stop the whole job).
//
// Ranks are bound to connections: a message is taken as trainer t's only when it claims
// sender rank t and comes over trainer t's own connection (its link in the roster: the
// ZeroMQ routing id it connects with). Anything else, of any type, is dropped, counted and
// answered with an ERROR, so a forged UPDATE, SHUTDOWN, SAVE or LOOKUP from another
// connection changes nothing, even without DLRM_SECRET.
// A trainer whose own update was dropped never sees its step applied: its waits time out,
// and the server's log names every dropped UPDATE and why.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "engine/config/dlrm.pb.h"
#include "engine/net/endpoint.h"
#include "engine/net/options.h"
#include "engine/ps/shard_owner.h"

namespace dlrm::ps {

class EmbeddingServer {
 public:
  // Borrows endpoint (kListen) and owner. index: the server's number in the plan.
  // trainer_links[t]: the routing id trainer t connects with (JobLayout::trainer_links).
  // trainer_timeout: how long a trainer may stay silent (trainers send heartbeats)
  // before Serve gives up on the job. wire: the precision rows are answered in
  // (WireValuePrecision of the job's DistributedConfig). max_message_bytes: the endpoint's
  // (TransportOptions): a lookup whose answer could not travel is refused before any row
  // is read.
  EmbeddingServer(net::Endpoint* endpoint, ShardOwner* owner, int32_t index,
                  std::vector<std::string> trainer_links, std::chrono::milliseconds trainer_timeout,
                  config::TableConfig::Precision wire = config::TableConfig::FP32,
                  int64_t max_message_bytes = net::TransportOptions().max_message_bytes);
  ~EmbeddingServer();
  EmbeddingServer(const EmbeddingServer&) = delete;
  EmbeddingServer& operator=(const EmbeddingServer&) = delete;

  // Serves until every trainer has sent SHUTDOWN, or Stop() (from any thread). Throws
  // kTimeout naming a trainer that has been silent for trainer_timeout (it died).
  void Serve();
  void Stop();

  int64_t lookups_served() const;
  // Messages dropped (UPDATEs failing validation, messages not from their rank's
  // connection), and the last one's reason ("" for none).
  int64_t messages_dropped() const;
  std::string last_drop_reason() const;

 private:
  struct ParkedLookup {
    net::Received request;
    int64_t step;
    std::vector<ShardRows> rows;
  };
  // kInvalidArgument when the answer to `request` (valid shards) would not fit a message.
  void CheckAnswerFits(const std::vector<ShardRows>& request) const;
  // The trainer `r` comes from: the rank it claims, if it came over that trainer's link.
  std::optional<int32_t> SendingTrainer(const net::Received& r) const;
  // Counts and logs (rate-limited) a dropped message.
  void Drop(const std::string& reason);
  void Handle(net::Received r);
  void HandleLookup(net::Received r);
  void HandleUpdate(const net::Received& r);
  void HandleWait(net::Received r);  // FLUSH, SAVE
  // Answers what became possible: parked lookups, flushes and saves. Any thread.
  void ServeParked();
  // Answers a lookup now; false if its step is not servable yet. parked_mu_ held.
  bool TryAnswer(ParkedLookup& lookup);
  bool TryAnswerWait(const net::Received& r);  // parked_mu_ held
  void Save(const net::Received& r, int64_t step);

  net::Endpoint* const endpoint_;
  ShardOwner* const owner_;
  const int32_t index_;
  const net::RankLinks trainer_links_;
  const int32_t num_trainers_;
  const std::chrono::milliseconds trainer_timeout_;
  const config::TableConfig::Precision wire_;
  const int64_t max_message_bytes_;
  std::vector<std::chrono::steady_clock::time_point> last_heard_;  // by trainer
  mutable std::mutex parked_mu_;
  std::deque<ParkedLookup> parked_lookups_;
  std::deque<net::Received> parked_waits_;
  int64_t lookups_served_ = 0;
  int64_t messages_dropped_ = 0;  // parked_mu_
  std::string last_drop_reason_;  // parked_mu_
  std::set<int32_t> trainers_done_;
  std::atomic<bool> stop_{false};
};

}  // namespace dlrm::ps

// The consistency rule of one embedding owner, shared by the in-process service (tests,
// one host) and the embedding-server process, so both behave alike by construction.
//
// The rule is one number, the staleness bound k: a lookup for step s is served once every
// update of steps <= s - 1 - k has been applied.
//  - k = 0 is `sync`: step s sees every earlier step's update, as in one process.
//  - k > 0 is `hybrid` (PERSIA): trainers may run up to k steps ahead of the embedding
//    updates, which a background thread applies while dense training goes on.
// A step's update is applied once every trainer's part of it is in, in step order; the
// parts are concatenated in rank order (= global sample order), so the owner runs the
// single-process update. A rejected update stops the owner: every later call fails with
// the rejection (fail-stop; the rows stay as they were before the rejected step).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <thread>
#include <vector>

#include "engine/ps/feature_update.h"
#include "engine/ps/shard_store.h"

namespace dlrm::ps {

// The rows of one shard asked for by one lookup: ids in, rows [ids x shard width] out.
struct ShardRows {
  int32_t shard = 0;
  std::vector<int64_t> ids;
  std::vector<float> rows;
};

class ShardOwner {
 public:
  // Borrows store. `owner` (the server index) names it in errors. world_size: trainers
  // per step. applied_step: the last step already in the store (0, or a checkpoint's).
  ShardOwner(EmbeddingShardStore* store, int32_t owner, int32_t world_size, int64_t staleness,
             int64_t applied_step = 0);
  ~ShardOwner();
  ShardOwner(const ShardOwner&) = delete;
  ShardOwner& operator=(const ShardOwner&) = delete;

  // Checks a lookup's shards and step (>= 1) without serving it; kInvalidArgument.
  void ValidateLookup(const std::vector<ShardRows>& request, int64_t step) const;
  // Whether a lookup for `step` may be served now. Throws the rejection of an update.
  bool Servable(int64_t step) const;
  // Waits up to `timeout` for Servable(step); kTimeout says what was applied and needed.
  void WaitServable(int64_t step, std::chrono::milliseconds timeout) const;
  // Fills request[i].rows. The caller has seen Servable(step). kInvalidArgument /
  // kOutOfRange for a bad shard or id; nothing is filled then.
  void ReadRows(int64_t step, std::vector<ShardRows>* request);

  // Trainer `rank`'s part of step `step`'s update (one entry per feature the owner
  // serves, in order). kInvalidArgument for a rank outside the world, a step already
  // applied, a step further ahead than the staleness bound allows, or a repeated part;
  // the owner's state is unchanged then.
  void AddUpdate(int32_t rank, int64_t step, float lr, std::vector<FeatureUpdate> part);

  // Waits until every update up to `step` is applied; throws a rejection or kTimeout.
  void WaitApplied(int64_t step, std::chrono::milliseconds timeout) const;
  // Whether every update up to `step` is applied (no wait). Throws a rejection.
  bool Applied(int64_t step) const;

  // Runs fn(last applied step) with no update applied meanwhile (checkpoints).
  void Frozen(const std::function<void(int64_t applied)>& fn);
  // Stops the owner as if an update had been rejected for `reason` (a malformed or
  // rule-breaking update message: the step it belonged to can never complete).
  void Fail(const std::string& reason);

  int64_t applied() const;
  // The largest (s - 1) - (last applied step) a served lookup for step s saw; <= k.
  int64_t max_staleness_served() const;
  int64_t staleness() const { return staleness_; }
  const EmbeddingShardStore& store() const { return *store_; }

  // Runs after each applied or rejected step, on the applier thread, with none of the
  // owner's locks held (the network server answers lookups that were waiting). Setting
  // it waits for a running call to finish, so a server may reset it before it goes.
  void set_on_applied(std::function<void()> callback);
  // For tests of hybrid mode: each apply first sleeps this long (a slow server).
  void set_apply_delay(std::chrono::milliseconds delay);

 private:
  struct Pending {
    std::vector<std::vector<FeatureUpdate>> parts;  // by rank
    std::vector<bool> arrived;
    int32_t count = 0;
    float lr = 0;
  };
  void NotifyApplied();
  void ThrowIfFailed() const;         // mu_ held
  bool UpToDate(int64_t step) const;  // mu_ held: every update <= step applied
  bool NextStepReady() const;         // mu_ held
  void ApplyLoop();

  EmbeddingShardStore* const store_;
  const int32_t owner_;
  const int32_t world_size_;
  const int64_t staleness_;
  std::mutex callback_mu_;
  std::function<void()> on_applied_;  // guarded by callback_mu_

  std::shared_mutex rows_mu_;  // reads share, an apply is exclusive
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  std::map<int64_t, Pending> pending_;  // by step
  int64_t applied_;
  int64_t max_staleness_served_ = 0;
  std::string error_;  // set when an update was rejected
  std::chrono::milliseconds apply_delay_{0};
  bool stopping_ = false;
  std::thread applier_;
};

}  // namespace dlrm::ps

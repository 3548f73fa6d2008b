#include "engine/shard/placement.h"

#include <algorithm>
#include <limits>
#include <numeric>
#include <set>
#include <utility>

#include "engine/core/status.h"

namespace dlrm::shard {
namespace {

using Kind = PlacementUnit::Kind;

// A server as a destination for one shard; the smaller is the better choice. Ties on the
// score go to the lower load, then the lower server index, so placement is deterministic.
struct Candidate {
  double score;
  double load;
  int32_t server;
  bool operator<(const Candidate& other) const {
    if (score != other.score) return score < other.score;
    if (load != other.load) return load < other.load;
    return server < other.server;
  }
};

class Placer {
 public:
  Placer(const std::vector<PlacementUnit>& units, const PlacementOptions& options)
      : units_(units),
        n_(options.num_servers),
        group_size_(options.group_size),
        strict_spread_(options.strict_spread),
        capacity_(options.server_memory_bytes > 0 ? options.server_memory_bytes
                                                  : std::numeric_limits<int64_t>::max()),
        load_(n_, 0.0),
        memory_(n_, 0),
        on_server_(n_) {
    DLRM_INTERNAL_CHECK(n_ >= 1 && group_size_ >= 1 && group_size_ <= n_);
    double total_load = 0, total_memory = 0;
    placement_.servers.resize(units_.size());
    for (size_t u = 0; u < units_.size(); ++u) {
      placement_.servers[u].assign(units_[u].shards.size(), -1);
      for (const ShardCost& c : units_[u].shards) {
        total_load += c.load;
        total_memory += static_cast<double>(c.memory_bytes);
      }
    }
    // Scores are relative to the per-server means, so that neither dimension's unit wins.
    inv_load_ = total_load > 0 ? n_ / total_load : 0;
    inv_memory_ = total_memory > 0 ? n_ / total_memory : 0;
  }

  Placement Run(bool refine) {
    std::vector<double> unit_key(units_.size(), 0.0);
    for (size_t u = 0; u < units_.size(); ++u)
      for (const ShardCost& c : units_[u].shards) unit_key[u] = std::max(unit_key[u], Key(c));
    std::vector<int32_t> order(units_.size());
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
      return unit_key[a] != unit_key[b] ? unit_key[a] > unit_key[b] : a < b;
    });
    for (const int32_t u : order) {
      if (units_[u].shards.empty()) continue;
      const std::vector<int32_t> shards = ShardOrder(u);
      bool ok = false;
      switch (units_[u].kind) {
        case Kind::kSingle:
          ok = true;
          for (const int32_t i : shards) ok = ok && PlaceAnywhere(u, i);
          break;
        case Kind::kSpread: ok = PlaceSpread(u, shards); break;
        case Kind::kGroup: ok = PlaceGroup(u, shards); break;
      }
      if (!ok) {
        placement_.failed_unit = u;
        return std::move(placement_);
      }
    }
    if (refine) Refine();
    return std::move(placement_);
  }

 private:
  const ShardCost& Cost(int32_t u, int32_t i) const { return units_[u].shards[i]; }

  double Key(const ShardCost& c) const {
    return std::max(c.load * inv_load_, static_cast<double>(c.memory_bytes) * inv_memory_);
  }

  Candidate Rate(int32_t s, const ShardCost& c) const {
    const double load = load_[s] + c.load;
    return {
        std::max(load * inv_load_, static_cast<double>(memory_[s] + c.memory_bytes) * inv_memory_),
        load, s};
  }

  bool Fits(int32_t s, int64_t bytes) const { return bytes <= capacity_ - memory_[s]; }

  bool HasUnit(int32_t s, int32_t u) const {
    for (const auto& [unit, shard] : on_server_[s])
      if (unit == u) return true;
    return false;
  }

  // The unit's shards, largest first.
  std::vector<int32_t> ShardOrder(int32_t u) const {
    std::vector<int32_t> order(units_[u].shards.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](int32_t a, int32_t b) { return Key(Cost(u, a)) > Key(Cost(u, b)); });
    return order;
  }

  void Assign(int32_t u, int32_t i, int32_t s) {
    placement_.servers[u][i] = s;
    load_[s] += Cost(u, i).load;
    memory_[s] += Cost(u, i).memory_bytes;
    on_server_[s].emplace_back(u, i);
  }

  void Move(int32_t u, int32_t i, int32_t to) {
    const int32_t from = placement_.servers[u][i];
    auto& list = on_server_[from];
    list.erase(std::find(list.begin(), list.end(), std::make_pair(u, i)));
    load_[from] -= Cost(u, i).load;
    memory_[from] -= Cost(u, i).memory_bytes;
    Assign(u, i, to);
  }

  bool PlaceAnywhere(int32_t u, int32_t i) {
    const ShardCost& c = Cost(u, i);
    Candidate best{0, 0, -1};
    for (int32_t s = 0; s < n_; ++s) {
      if (!Fits(s, c.memory_bytes)) continue;
      const Candidate candidate = Rate(s, c);
      if (best.server < 0 || candidate < best) best = candidate;
    }
    if (best.server < 0) return false;
    Assign(u, i, best.server);
    return true;
  }

  // The shards of a split table are near equal, so placing them one by one, each on the
  // best server not yet holding the table, picks the best k servers for the largest one.
  bool PlaceSpread(int32_t u, const std::vector<int32_t>& shards) {
    const ShardCost& largest = Cost(u, shards[0]);
    std::vector<Candidate> candidates;
    candidates.reserve(n_);
    for (int32_t s = 0; s < n_; ++s)
      if (Fits(s, largest.memory_bytes)) candidates.push_back(Rate(s, largest));
    const size_t k = std::min(shards.size(), candidates.size());
    std::partial_sort(candidates.begin(), candidates.begin() + k, candidates.end());
    for (size_t j = 0; j < k; ++j) Assign(u, shards[j], candidates[j].server);
    // Not enough servers with room for distinct placement: share servers rather than fail.
    if (k < shards.size() && strict_spread_) return false;
    for (size_t j = k; j < shards.size(); ++j)
      if (!PlaceAnywhere(u, shards[j])) return false;
    return true;
  }

  // All shards inside the group that ends with the lowest maximum score.
  bool PlaceGroup(int32_t u, const std::vector<int32_t>& shards) {
    DLRM_INTERNAL_CHECK(static_cast<int32_t>(shards.size()) <= group_size_);
    const ShardCost& largest = Cost(u, shards[0]);
    const int32_t groups = n_ / group_size_;
    std::vector<Candidate> best_servers, servers(group_size_);
    double best_score = 0;
    for (int32_t g = 0; g < groups; ++g) {
      for (int32_t j = 0; j < group_size_; ++j) servers[j] = Rate(g * group_size_ + j, largest);
      std::sort(servers.begin(), servers.end());
      double score = 0;
      bool fits = true;
      for (size_t j = 0; j < shards.size() && fits; ++j) {
        const ShardCost& c = Cost(u, shards[j]);
        fits = Fits(servers[j].server, c.memory_bytes);
        score = std::max(score, Rate(servers[j].server, c).score);
      }
      if (fits && (best_servers.empty() || score < best_score)) {
        best_score = score;
        best_servers = servers;
      }
    }
    if (best_servers.empty()) return false;
    for (size_t j = 0; j < shards.size(); ++j) Assign(u, shards[j], best_servers[j].server);
    return true;
  }

  bool Movable(int32_t u) const { return units_[u].kind != Kind::kGroup; }

  // Would unit u's shard sit on server s next to another shard of its table?
  bool Conflicts(int32_t u, int32_t s) const {
    return units_[u].kind == Kind::kSpread && HasUnit(s, u);
  }

  // Greedy leaves up to one shard's worth of imbalance; moving or swapping shards off the
  // most loaded server takes most of it back. Peak memory never rises. Each step looks at
  // a bounded number of candidates and the whole pass at most kRefineWork of them, so
  // planning stays fast (and deterministic) for any number of servers.
  void Refine() {
    constexpr int64_t kRefineWork = int64_t{1} << 24;
    const int64_t memory_limit =
        std::min(capacity_, *std::max_element(memory_.begin(), memory_.end()));
    LoadOrder by_load;
    for (int32_t s = 0; s < n_; ++s) by_load.emplace(load_[s], s);
    for (int64_t work = 0; work < kRefineWork;) {
      const int32_t h = by_load.rbegin()->second;
      if (!(load_[h] > 0)) return;
      // Only real gains count, so rounding noise cannot keep the loop going.
      const double peak = load_[h] * (1 - 1e-9);
      Change change = BestMove(h, by_load, memory_limit, peak, &work);
      if (change.to < 0) change = BestSwap(h, by_load, memory_limit, peak, &work);
      if (change.to < 0) return;
      MoveOrdered(change.shard, change.to, &by_load);
      if (change.swapped.first >= 0) MoveOrdered(change.swapped, h, &by_load);
    }
  }

  using LoadOrder = std::set<std::pair<double, int32_t>>;  // (load, server), least first
  using ShardRef = std::pair<int32_t, int32_t>;            // (unit, shard)
  // One step of Refine off server h: `shard` moves to server `to` and, for a swap,
  // `swapped` (one of `to`'s) moves to h. to < 0: no step lowers the peak.
  struct Change {
    ShardRef shard{-1, -1}, swapped{-1, -1};
    int32_t to = -1;
  };

  // The first shard of h (in its order) that moves to the least loaded server that takes
  // it, of the kMoveTargets least loaded, with a new peak below `peak`; each later shard
  // must beat the peak the one before would give.
  Change BestMove(int32_t h, const LoadOrder& by_load, int64_t memory_limit, double peak,
                  int64_t* work) const {
    constexpr int kMoveTargets = 64;
    Change best;
    for (const auto& [u, i] : on_server_[h]) {
      if (!Movable(u)) continue;
      const ShardCost& c = Cost(u, i);
      int tried = 0;
      for (auto it = by_load.begin(); it != by_load.end() && tried < kMoveTargets; ++it, ++tried) {
        ++*work;
        const int32_t t = it->second;
        if (load_[t] + c.load >= peak) break;
        if (t == h || !Fits(t, c.memory_bytes) || memory_[t] + c.memory_bytes > memory_limit ||
            Conflicts(u, t))
          continue;
        peak = std::max(load_[h] - c.load, load_[t] + c.load);
        best = {{u, i}, {-1, -1}, t};
        break;  // the least loaded valid server is this shard's best target
      }
    }
    return best;
  }

  // The swap of a shard of h with one of the kSwapTargets least loaded servers' that
  // lowers the peak most below `peak`, memory within memory_limit on both sides.
  Change BestSwap(int32_t h, const LoadOrder& by_load, int64_t memory_limit, double peak,
                  int64_t* work) const {
    constexpr int kSwapTargets = 4;
    Change best;
    int tried = 0;
    for (auto it = by_load.begin(); it != by_load.end() && tried < kSwapTargets; ++it) {
      const int32_t t = it->second;
      if (t == h) continue;
      ++tried;
      for (const auto& [ua, ia] : on_server_[h]) {
        if (!Movable(ua)) continue;
        const ShardCost& a = Cost(ua, ia);
        for (const auto& [ub, ib] : on_server_[t]) {
          ++*work;
          if (!Movable(ub)) continue;
          const ShardCost& b = Cost(ub, ib);
          const double delta = a.load - b.load;
          if (!(delta > 0) || std::max(load_[h] - delta, load_[t] + delta) >= peak) continue;
          const int64_t bytes = a.memory_bytes - b.memory_bytes;
          if (memory_[h] - bytes > memory_limit || memory_[t] + bytes > memory_limit) continue;
          if (ua != ub && (Conflicts(ua, t) || Conflicts(ub, h))) continue;
          peak = std::max(load_[h] - delta, load_[t] + delta);
          best = {{ua, ia}, {ub, ib}, t};
        }
      }
    }
    return best;
  }

  // Move, keeping by_load in order.
  void MoveOrdered(ShardRef shard, int32_t to, LoadOrder* by_load) {
    const int32_t from = placement_.servers[shard.first][shard.second];
    by_load->erase({load_[from], from});
    by_load->erase({load_[to], to});
    Move(shard.first, shard.second, to);
    by_load->emplace(load_[from], from);
    by_load->emplace(load_[to], to);
  }

  const std::vector<PlacementUnit>& units_;
  const int32_t n_;
  const int32_t group_size_;
  const bool strict_spread_;
  const int64_t capacity_;
  double inv_load_ = 0;
  double inv_memory_ = 0;
  std::vector<double> load_;
  std::vector<int64_t> memory_;
  std::vector<std::vector<std::pair<int32_t, int32_t>>> on_server_;  // (unit, shard)
  Placement placement_;
};

}  // namespace

Placement PlaceUnits(const std::vector<PlacementUnit>& units, const PlacementOptions& options) {
  return Placer(units, options).Run(options.refine);
}

}  // namespace dlrm::shard

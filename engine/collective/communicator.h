// The trainers' collectives. AllGather: every rank contributes bytes, every rank receives
// all contributions in rank order. Sums are then formed by each rank in one fixed order
// (TreeReduceInto over the ranks' parts), so every replica gets the same bits and the
// single-process association is kept. A library allreduce (ring or tree, picked by
// message size) would not promise either.
//
// AllToAll: every rank sends each rank its own bytes (the Neo layout's exchange of pooled
// embeddings, train/model_parallel_trainer.h).
//
// Implementations: LocalCommunicator (ranks as threads of one process: tests, one host),
// and communicators over the transport or built from a host's own allgather function
// (a Spark or MPI host plugs in there).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace dlrm::collective {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int32_t rank() const = 0;
  virtual int32_t world_size() const = 0;
  // Collective: every rank calls it with its contribution (sizes may differ); returns the
  // world_size() contributions in rank order. Throws kTimeout if a rank does not arrive.
  virtual std::vector<std::string> AllGather(const std::string& contribution) = 0;
  // Collective: to_each[r] goes to rank r (to_each.size() == world_size(); to_each[rank()]
  // comes back as it is); returns what each rank sent this one, in rank order. The default
  // runs over AllGather, so each rank receives every rank's whole contribution (world_size
  // times the bytes it needs); a communicator that reaches each rank directly overrides
  // it. kInvalidArgument for a to_each of another size (before anything is sent);
  // kDataLoss for a peer's malformed contribution.
  virtual std::vector<std::string> AllToAll(const std::vector<std::string>& to_each);
};

// kInvalidArgument unless to_each has one part per rank (AllToAll's check).
void CheckAllToAllParts(const std::vector<std::string>& to_each, int32_t world_size);

// Ranks that are threads of one process, meeting in a shared hub.
class LocalCommunicatorHub {
 public:
  LocalCommunicatorHub(int32_t world_size, std::chrono::milliseconds timeout);
  // The communicator of `rank`; it borrows the hub, which must outlive it.
  std::unique_ptr<Communicator> Rank(int32_t rank);

 private:
  friend class LocalCommunicator;
  std::vector<std::string> Exchange(int32_t rank, const std::string& contribution);

  const int32_t world_size_;
  const std::chrono::milliseconds timeout_;
  std::mutex mu_;
  std::condition_variable cv_;
  uint64_t generation_ = 0;  // completed exchanges
  int32_t arrived_ = 0;
  int32_t departed_ = 0;  // ranks that took the last result
  std::vector<std::string> pending_, result_;
};

}  // namespace dlrm::collective

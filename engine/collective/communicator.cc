#include "engine/collective/communicator.h"

#include "engine/core/byte_codec.h"
#include "engine/core/status.h"

namespace dlrm::collective {

void CheckAllToAllParts(const std::vector<std::string>& to_each, int32_t world_size) {
  if (static_cast<int32_t>(to_each.size()) != world_size)
    ThrowInvalid("all-to-all: ", to_each.size(), " parts for ", world_size, " ranks");
}

std::vector<std::string> Communicator::AllToAll(const std::vector<std::string>& to_each) {
  const int32_t size = world_size();
  CheckAllToAllParts(to_each, size);
  ByteWriter out;
  size_t bytes = 0;
  for (const std::string& part : to_each) bytes += sizeof(uint64_t) + part.size();
  out.Reserve(bytes);
  for (const std::string& part : to_each) out.PutString(part);
  const std::vector<std::string> all = AllGather(std::move(out).Take());
  if (static_cast<int32_t>(all.size()) != size)
    Throw(StatusCode::kDataLoss, "all-to-all: ", all.size(), " contributions for ", size, " ranks");
  std::vector<std::string> mine(size);
  for (int32_t from = 0; from < size; ++from) {
    if (from == rank()) {
      mine[from] = to_each[from];
      continue;
    }
    ByteReader in(all[from], "all-to-all contribution");
    for (int32_t to = 0; to < size; ++to) {
      const std::string_view part = in.GetBytes("part");
      if (to == rank()) mine[from] = std::string(part);
    }
    in.ExpectEnd();
  }
  return mine;
}

class LocalCommunicator : public Communicator {
 public:
  LocalCommunicator(LocalCommunicatorHub* hub, int32_t rank) : hub_(hub), rank_(rank) {}
  int32_t rank() const override { return rank_; }
  int32_t world_size() const override { return hub_->world_size_; }
  std::vector<std::string> AllGather(const std::string& contribution) override {
    return hub_->Exchange(rank_, contribution);
  }

 private:
  LocalCommunicatorHub* hub_;
  int32_t rank_;
};

LocalCommunicatorHub::LocalCommunicatorHub(int32_t world_size, std::chrono::milliseconds timeout)
    : world_size_(world_size), timeout_(timeout) {
  if (world_size <= 0) ThrowInvalid("communicator: world_size must be > 0, got ", world_size);
  pending_.resize(world_size);
}

std::unique_ptr<Communicator> LocalCommunicatorHub::Rank(int32_t rank) {
  if (rank < 0 || rank >= world_size_)
    ThrowInvalid("communicator: rank ", rank, " is outside [0, ", world_size_, ")");
  return std::make_unique<LocalCommunicator>(this, rank);
}

std::vector<std::string> LocalCommunicatorHub::Exchange(int32_t rank,
                                                        const std::string& contribution) {
  std::unique_lock<std::mutex> lock(mu_);
  // A rank that comes back for the next exchange waits until everyone took the last one.
  if (!cv_.wait_for(lock, timeout_, [&] { return departed_ == 0 || arrived_ > 0; }))
    Throw(StatusCode::kTimeout, "communicator: rank ", rank,
          " timed out waiting for the previous all-gather to finish");
  const uint64_t generation = generation_;
  pending_[rank] = contribution;
  if (++arrived_ == world_size_) {
    result_.swap(pending_);
    pending_.assign(world_size_, std::string());
    arrived_ = 0;
    departed_ = world_size_;
    ++generation_;
    cv_.notify_all();
  } else if (!cv_.wait_for(lock, timeout_, [&] { return generation_ != generation; })) {
    Throw(StatusCode::kTimeout, "communicator: rank ", rank, " waited ", timeout_.count(),
          " ms in an all-gather that ", world_size_ - arrived_, " rank(s) never joined");
  }
  std::vector<std::string> out = result_;
  if (--departed_ == 0) cv_.notify_all();
  return out;
}

}  // namespace dlrm::collective

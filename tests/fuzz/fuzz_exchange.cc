// libFuzzer harness: what a trainer decodes from its peers' bytes in a synchronous step
// (train/dense_exchange.h; collectives over the network carry them) and what it then does
// with what decodes: a part's outcome; a contribution in each wire precision, checked and
// reduced with this rank's own, and the replicated tables' updates in it applied to a
// replica store; a model-parallel input part joined by its owner (PooledLayout::JoinInput),
// validated and pooled by the owner's store; an evaluation exchange (GatherEvaluation).
// The input is one peer's message, tried as each kind. Every input is decoded and used, or
// refused naming bad input (fuzz_support.h); a peer's own error, passed on with its code,
// is an answer too. Seeds: each kind, encoded by the trainers' own encoders.
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "engine/collective/communicator.h"
#include "engine/core/byte_codec.h"
#include "engine/core/thread_pool.h"
#include "engine/ps/feature_update.h"
#include "engine/ps/shard_store.h"
#include "engine/shard/planner.h"
#include "engine/shard/pooled_layout.h"
#include "engine/train/dense_exchange.h"
#include "tests/fuzz/fuzz_support.h"
#include "tests/support/dist_config.h"
#include "tests/support/dist_data.h"

namespace dlrm::fuzz {
namespace {

using config::ShardingConfig;
using config::TableConfig;

constexpr TableConfig::Precision kWires[] = {TableConfig::FP32, TableConfig::BF16,
                                             TableConfig::FP16};
constexpr size_t kParams = 6;            // this rank's dense gradient: what a peer's must match
constexpr int64_t kSamples = 2;          // this rank's part: what a peer's must match
constexpr int64_t kMaxPooled = 1 << 22;  // floats pooled per input (the fuzzer's memory)

// Rank 0 of two, whose peer's contribution to every all-gather is `peer`.
class PeerBytes : public collective::Communicator {
 public:
  explicit PeerBytes(std::string_view peer) : peer_(peer) {}
  int32_t rank() const override { return 0; }
  int32_t world_size() const override { return 2; }
  std::vector<std::string> AllGather(const std::string& mine) override { return {mine, peer_}; }

 private:
  std::string peer_;
};

// Two ranks' layout of the distributed tests' model: column blocks owned by the ranks
// (rank 1's store joins and pools), and the same model replicated (the replicas' store).
struct Job {
  const config::DlrmConfig owned_config =
      testing::ShardedTestConfig(ShardingConfig::COLUMN_WISE, "sgd", "adagrad", 2);
  const shard::ShardingPlan owned_plan =
      shard::PlanSharding(owned_config, 2, shard::ShardOwners::kTrainers);
  const shard::PooledLayout layout{owned_config, owned_plan, 2};
  ps::EmbeddingShardStore owned{owned_config, owned_plan, 1};
  const config::DlrmConfig replica_config =
      testing::ShardedTestConfig(ShardingConfig::DATA_PARALLEL, "sgd", "adagrad", 2);
  const shard::ShardingPlan replica_plan =
      shard::PlanSharding(replica_config, 2, shard::ShardOwners::kTrainers);
  ps::EmbeddingShardStore replicas{replica_config, replica_plan, ps::kTrainerReplica};
  ThreadPool pool{1};
};

Job& TheJob() {
  static Job* job = new Job();  // lives for the process, as the engine's caches
  return *job;
}

void AsOutcome(std::string_view bytes) {
  RefusedOrDone([&] {
    ByteReader in(bytes, "fuzz outcome");
    const train::Outcome o = train::GetOutcome(&in);
    if (!o.ok() && !IsErrorCode(o.code))
      Finding("GetOutcome passed code " + std::to_string(o.code));
  });
}

// The replicated tables' update of a contribution (or of the input), as the trainers apply
// it: every rank's parts concatenated, over the global batch.
void ApplyReplicaUpdate(const std::string& encoded, int64_t global_batch) {
  const std::vector<ps::FeatureUpdate> part = ps::DecodeFeatureUpdates(encoded);
  TheJob().replicas.ApplyUpdate(ps::ConcatenateRanks({part, part}), global_batch, 0.05f, 1);
}

void AsContribution(std::string_view bytes, TableConfig::Precision wire) {
  RefusedOrDone([&] {
    ByteReader in(bytes, "fuzz contribution");
    std::vector<uint16_t> scratch;
    std::vector<train::Contribution> by_rank(2);
    train::DecodeContribution(&in, wire, &scratch, &by_rank[1]);
    in.ExpectEnd();
    if (!by_rank[1].outcome.ok()) return;  // a peer's own error: thrown as it came
    by_rank[0].samples = kSamples;         // this rank's part, as the trainers' own
    by_rank[0].dense_grad.assign(kParams, 0.25f);
    train::CheckContributions(by_rank, 1, kParams);
    const std::string update = by_rank[1].replica_update;
    train::ReduceContributions(by_rank, 0, &TheJob().pool);
    if (!update.empty()) ApplyReplicaUpdate(update, 2 * kSamples);
  });
}

void AsInputPart(std::string_view bytes) {
  RefusedOrDone([&] {
    ByteReader in(bytes, "fuzz input part");
    OwnedBatch part = train::GetBags(&in);
    in.ExpectEnd();
    Job& job = TheJob();
    const OwnedBatch joined = job.layout.JoinInput(1, {part, part});
    const ValidatedBatch batch = job.owned.ValidateLocalBatch(joined.view());
    if (joined.batch_size > kMaxPooled / job.owned.pooled_width()) return;
    std::vector<float> pooled(static_cast<size_t>(joined.batch_size) * job.owned.pooled_width());
    job.owned.Pool(batch, pooled.data());
  });
}

void AsEvaluation(std::string_view bytes) {
  RefusedOrDone([&] {
    PeerBytes comm(bytes);
    train::GatherEvaluation(&comm, "", {0.75, 0.25}, {1.0f, 0.0f});
  });
}

// A peer's update of the replicated tables: two samples of every replicated feature.
std::vector<ps::FeatureUpdate> ReplicaPart() {
  std::vector<ps::FeatureUpdate> part;
  for (const int32_t f : TheJob().replicas.features())
    part.push_back({f, {1, 2}, {3, 4, 5}, {}, std::vector<float>(16, 0.125f)});
  return part;
}

// One of each kind, encoded by the trainers' encoders.
std::vector<std::string> Seeds() {
  Job& job = TheJob();
  std::vector<std::string> seeds;
  ByteWriter outcome;
  train::PutOutcome({static_cast<int32_t>(StatusCode::kInvalidArgument), "bad part"}, &outcome);
  seeds.push_back(std::move(outcome).Take());
  for (const auto wire : kWires) {
    train::Contribution c;
    c.samples = kSamples;
    c.loss_sum = 1.25;
    c.replica_update = ps::EncodeFeatureUpdates(ReplicaPart(), wire);
    std::vector<uint16_t> scratch;
    ByteWriter out;
    train::EncodeContribution(c, std::vector<float>(kParams, 0.5f), wire, &scratch, &out);
    seeds.push_back(std::move(out).Take());
  }
  const OwnedBatch batch = testing::MakeTestBatch(job.owned_config, 0, 4);
  for (const OwnedBatch& part : job.layout.SplitInput(batch.view())) {
    ByteWriter out;
    train::PutBags(part, &out);
    seeds.push_back(std::move(out).Take());
  }
  ByteWriter evaluation;
  evaluation.PutString("");
  evaluation.PutArray(std::vector<double>{0.5, 0.125, 0.875});
  evaluation.PutArray(std::vector<float>{1.0f, 0.0f, 1.0f});
  seeds.push_back(std::move(evaluation).Take());
  return seeds;
}

}  // namespace
}  // namespace dlrm::fuzz

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  dlrm::fuzz::WriteSeedsIfAsked(argc, argv, dlrm::fuzz::Seeds);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  dlrm::fuzz::AsOutcome(bytes);
  for (const auto wire : dlrm::fuzz::kWires) dlrm::fuzz::AsContribution(bytes, wire);
  dlrm::fuzz::AsInputPart(bytes);
  dlrm::fuzz::AsEvaluation(bytes);
  return 0;
}

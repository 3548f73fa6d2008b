// A data-parallel job in one process for the distributed-training tests: embedding
// servers as shard stores behind a LocalEmbeddingService, trainers as DataParallelTrainers
// on a LocalCommunicatorHub, each with a thread pool of its own size (rank r has r + 1
// threads, so a result that depended on the thread count would show), stepped on
// threads of their own.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "engine/collective/communicator.h"
#include "engine/config/dlrm.pb.h"
#include "engine/core/status.h"
#include "engine/core/thread_pool.h"
#include "engine/data/batch.h"
#include "engine/ps/service.h"
#include "engine/ps/shard_store.h"
#include "engine/shard/planner.h"
#include "engine/train/data_parallel_trainer.h"
#include "engine/train/trainer_backend.h"

namespace dlrm::testing {

struct InProcessCluster {
  const int32_t num_trainers;
  shard::ShardingPlan plan;
  std::vector<std::unique_ptr<ps::EmbeddingShardStore>> servers;
  std::unique_ptr<ps::LocalEmbeddingService> service;
  collective::LocalCommunicatorHub hub;
  std::vector<std::unique_ptr<collective::Communicator>> comms;
  std::vector<std::unique_ptr<ThreadPool>> pools;
  std::vector<std::unique_ptr<train::DataParallelTrainer>> trainers;

  // staleness: the servers' bound (0: sync). make_backend: the trainers' devices (none:
  // the CPU).
  InProcessCluster(const config::DlrmConfig& c, int32_t num_servers, int32_t trainers,
                   int64_t staleness = 0, const train::TrainerBackendFactory& make_backend = {})
      : num_trainers(trainers),
        plan(shard::PlanSharding(c, num_servers)),
        hub(trainers, std::chrono::seconds(20)) {
    std::vector<ps::EmbeddingShardStore*> raw;
    for (int s = 0; s < num_servers; ++s) {
      servers.push_back(std::make_unique<ps::EmbeddingShardStore>(c, plan, s));
      raw.push_back(servers.back().get());
    }
    service = std::make_unique<ps::LocalEmbeddingService>(raw, trainers, staleness,
                                                          std::chrono::seconds(20));
    for (int r = 0; r < trainers; ++r) {
      comms.push_back(hub.Rank(r));
      pools.push_back(std::make_unique<ThreadPool>(r + 1));  // thread counts differ on purpose
      this->trainers.push_back(std::make_unique<train::DataParallelTrainer>(
          c, plan, comms.back().get(), service.get(), pools.back().get(), make_backend));
    }
  }

  // Every trainer's step on its part, concurrently; the losses by rank, or the errors.
  // wait_applied: return once the servers applied the step's updates.
  std::vector<float> Step(const std::vector<OwnedBatch>& parts, std::vector<std::string>* errors,
                          bool wait_applied = true) {
    std::vector<float> losses(num_trainers, 0.0f);
    errors->assign(num_trainers, "");
    std::vector<std::thread> threads;
    for (int r = 0; r < num_trainers; ++r) {
      threads.emplace_back([&, r] {
        try {
          losses[r] = trainers[r]->TrainStep(parts[r].view());
        } catch (const Error& e) {
          (*errors)[r] = e.what();
        }
      });
    }
    for (auto& t : threads) t.join();
    // Updates are applied in the background; parameters are compared once they landed.
    if (wait_applied) service->WaitUntilApplied(trainers[0]->step());
    return losses;
  }
};

}  // namespace dlrm::testing

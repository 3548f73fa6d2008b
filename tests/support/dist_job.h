// A whole job over loopback TCP for the distributed-training tests: a coordinator,
// embedding servers and trainers as threads of this process, every byte between them
// through the transport, each trainer running a body of the test's between joining and
// Finish; what each peer failed with is collected.
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "engine/cluster/coordinator.h"
#include "engine/cluster/messages.h"
#include "engine/cluster/rendezvous.h"
#include "engine/config/dlrm.pb.h"
#include "engine/core/status.h"
#include "engine/net/client.h"
#include "engine/net/context.h"
#include "engine/net/endpoint.h"
#include "engine/ps/server_role.h"
#include "engine/train/trainer_backend.h"
#include "engine/train/trainer_role.h"
#include "tests/support/dist_data.h"

namespace dlrm::testing {

inline constexpr int32_t kJobServers = 2, kJobTrainers = 2;

// What each trainer does between joining and Finish; its index is t.trainer_rank().
using TrainerBody = std::function<void(train::TrainerRole& t)>;

struct JobResult {
  std::vector<std::string> server_errors, trainer_errors;
  std::string coordinator_error;  // "" when every peer left
};

// Runs a job: ranks 0..servers-1 are servers, the rest trainers. `dead_server` replaces
// server 1 by a peer that joins and then vanishes (a server that died). The coordinator's
// address is published through coordinator_address when given; the trainers get
// `devices` (none: the CPU only) and, when given, trainer t its DLRM_DEVICE
// trainer_devices[t].
inline JobResult RunJob(
    const config::DlrmConfig& c, const std::string& restore, const TrainerBody& body,
    int64_t timeout_ms = 20000, bool dead_server = false,
    cluster::ClusterEnv::Collective collective = cluster::ClusterEnv::Collective::kBuiltin,
    int32_t servers = kJobServers, int32_t trainers = kJobTrainers,
    std::atomic<const std::string*>* coordinator_address = nullptr,
    const train::TrainerDevices& devices = {},
    const std::vector<std::string>& trainer_devices = {}) {
  net::Context context;
  const int32_t world = servers + trainers;
  // The dead server's link to the coordinator: it outlives the coordinator, silent.
  std::unique_ptr<net::Client> dead_link;
  cluster::Coordinator coordinator(context, world, "tcp://127.0.0.1:*", net::TransportOptions());
  JobResult result;
  std::atomic<bool> coordinator_done{false};
  std::thread coordinator_thread([&] {
    try {
      coordinator.Rendezvous(std::chrono::milliseconds(timeout_ms));
      coordinator.Serve();
    } catch (const Error& e) {
      result.coordinator_error = e.what();
    }
    coordinator_done = true;
  });
  if (coordinator_address) *coordinator_address = &coordinator.address();
  result.server_errors.resize(static_cast<size_t>(servers));
  result.trainer_errors.resize(static_cast<size_t>(trainers));
  std::vector<std::thread> peers;
  for (int32_t rank = 0; rank < world; ++rank) {
    peers.emplace_back([&, rank] {
      const bool server = rank < servers;
      cluster::ClusterEnv env =
          PeerEnv(coordinator.address(), server ? cluster::ROLE_SERVER : cluster::ROLE_TRAINER,
                  rank, world, timeout_ms);
      env.collective = collective;
      if (!server && !trainer_devices.empty()) env.device = trainer_devices[rank - servers];
      std::string& error =
          server ? result.server_errors[rank] : result.trainer_errors[rank - servers];
      try {
        if (server && dead_server && rank == 1) {
          // Joins (HELLO, roster) as a killed process would have, then sends nothing: no
          // heartbeats, no answers (its listener closes).
          net::Endpoint listener(context, net::Endpoint::kListen, env.PeerBindEndpoint(),
                                 env.Transport(), "doomed server");
          dead_link = std::make_unique<net::Client>(context, env.CoordinatorEndpoint(),
                                                    env.Transport(), "coordinator", rank);
          cluster::Hello hello;
          hello.set_role(cluster::ROLE_SERVER);
          hello.set_rank(rank);
          hello.set_world_size(world);
          hello.set_address(listener.address());
          dead_link->Call(cluster::MakeHello(hello), std::chrono::milliseconds(timeout_ms));
          return;
        }
        if (server) {
          ps::RunEmbeddingServer(context, env, c, restore);
        } else {
          train::TrainerRole t(env, c, restore, nullptr, devices);
          body(t);
          t.Finish();
        }
      } catch (const Error& e) {
        error = e.what();
      }
    });
  }
  for (auto& p : peers) p.join();
  // The coordinator ends by itself: every peer left, or one left and the rest did not
  // within the timeout (dead or failed peers). Stopped only when it does not.
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(cluster::kLeaveTimeouts * timeout_ms + 5000);
  while (!coordinator_done && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  if (!coordinator_done) {
    ADD_FAILURE() << "the coordinator still waits after every peer has ended";
    coordinator.Stop();
  }
  coordinator_thread.join();
  return result;
}

}  // namespace dlrm::testing

// Data and environments for the distributed-training tests: deterministic batches with
// repeated and weighted ids, a global batch's per-trainer parts, and the ClusterEnv of a
// peer of a test coordinator.
#pragma once

#include <cstdint>
#include <string>

#include "engine/cluster/cluster_env.h"
#include "engine/config/config.h"
#include "engine/config/dlrm.pb.h"
#include "engine/core/philox.h"
#include "engine/data/batch.h"

namespace dlrm::testing {

// Batch number `index` of `samples` samples: ids half from a hot set of 8 rows, half
// uniform, each with a weight.
inline OwnedBatch MakeTestBatch(const config::DlrmConfig& c, int64_t index, int64_t samples) {
  const CounterRng rng(3, 9, static_cast<uint64_t>(index));
  uint64_t k = 0;
  OwnedBatch b;
  b.batch_size = samples;
  b.num_dense = c.model().num_dense_features();
  b.num_sparse = c.model().sparse_features_size();
  for (int64_t i = 0; i < samples * b.num_dense; ++i)
    b.dense.push_back(static_cast<float>(rng.Normal(k++)));
  for (int64_t i = 0; i < samples; ++i) b.labels.push_back(rng.Uniform(k++) < 0.3 ? 1.0f : 0.0f);
  for (int f = 0; f < b.num_sparse; ++f) {
    const int t = FindTable(c.model(), c.model().sparse_features(f).table());
    const int64_t rows = c.model().tables(t).num_rows();
    for (int64_t s = 0; s < samples; ++s) {
      const auto len = static_cast<int32_t>(rng.Uniform(k++) * 4);
      b.lengths.push_back(len);
      for (int32_t i = 0; i < len; ++i) {
        const double pick = rng.Uniform(k++);
        b.ids.push_back(pick < 0.5 ? static_cast<int64_t>(pick * 8)
                                   : static_cast<int64_t>(rng.Uniform(k++) * rows));
        b.weights.push_back(static_cast<float>(0.5 + rng.Uniform(k++)));
      }
    }
  }
  return b;
}

// Samples [s0, s1) of a batch: one trainer's part.
inline OwnedBatch Part(const OwnedBatch& g, int64_t s0, int64_t s1) {
  return SliceBatch(g.view(), s0, s1);
}

// A ClusterEnv for a peer of a coordinator at `endpoint` ("tcp://127.0.0.1:port").
inline cluster::ClusterEnv PeerEnv(const std::string& endpoint, cluster::Role role, int32_t rank,
                                   int32_t world, int64_t timeout_ms = 5000,
                                   const std::string& secret = "") {
  cluster::ClusterEnv env;
  env.role = role;
  env.rank = rank;
  env.world_size = world;
  const size_t colon = endpoint.rfind(':');
  env.coordinator_host = endpoint.substr(6, colon - 6);
  env.coordinator_port = std::stoi(endpoint.substr(colon + 1));
  env.secret = secret;
  env.timeout_ms = timeout_ms;
  return env;
}

}  // namespace dlrm::testing

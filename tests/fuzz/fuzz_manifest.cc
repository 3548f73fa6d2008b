// libFuzzer harness (issue 17): the sharded checkpoint's MANIFEST and the restore it
// drives. The input is a MANIFEST file (its CRC32C trailer recomputed, as
// fuzz_checkpoint does) placed in a real checkpoint directory of a 2-server ROW_WISE job;
// then everything a restoring job does with it must succeed or refuse it naming bad
// input (fuzz_support.h): ReadManifest (the files' sizes and CRCs), ManifestForRestore
// against the job's config, and each server's load, as it is (same layout) or re-cut from
// the saved pieces the manifest's plan describes (LoadReshardedStore). The stores are
// the job's, so a manifest cannot make them grow. Seed: the directory's real MANIFEST.
#include <cstddef>
#include <cstdint>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "engine/checkpoint/sharded_checkpoint.h"
#include "engine/config/config.h"
#include "engine/model/dlrm_model.h"
#include "engine/optim/dense_optimizer.h"
#include "engine/ps/shard_store_file.h"
#include "engine/shard/planner.h"
#include "tests/fuzz/fuzz_support.h"
#include "tests/fuzz/seal_checkpoint.h"
#include "tests/support/dist_config.h"
#include "tests/support/test_support.h"

namespace dlrm::fuzz {
namespace {

constexpr int32_t kServers = 2;

struct Fixture {
  config::DlrmConfig config;
  shard::ShardingPlan plan;
  std::string dir;
  std::string clean;  // the real MANIFEST's bytes
};

// A complete checkpoint directory at step 2: both servers' shards, the dense state and
// the MANIFEST that ties them.
void WriteCheckpoint(const Fixture& f) {
  checkpoint::CheckpointManifest manifest;
  manifest.set_step(2);
  manifest.set_config(ConfigToText(f.config));
  *manifest.mutable_plan() = f.plan;
  manifest.set_num_trainers(2);
  manifest.set_num_servers(kServers);
  for (int32_t server = 0; server < kServers; ++server) {
    ps::EmbeddingShardStore store(f.config, f.plan, server);
    ps::SaveShardStore(store, server, 2, f.dir + "/" + checkpoint::ServerShardFile(server));
    checkpoint::ServerShardsEntry* entry = manifest.add_servers();
    entry->set_server(server);
    *entry->mutable_file() = checkpoint::DescribeFile(f.dir, checkpoint::ServerShardFile(server));
  }
  DlrmModel<float> model(f.config, nullptr, false);
  auto optimizer =
      MakeDenseOptimizer<float>(f.config.dense_optimizer(), model.dense_params().size());
  checkpoint::SaveDenseState(model, *optimizer, 2, f.dir + "/" + checkpoint::kDenseStateFile);
  *manifest.mutable_dense_state() = checkpoint::DescribeFile(f.dir, checkpoint::kDenseStateFile);
  checkpoint::WriteManifest(f.dir, manifest);
}

Fixture& TheFixture() {
  static Fixture* f = [] {
    auto* x = new Fixture;
    x->config =
        testing::ShardedTestConfig(config::ShardingConfig::ROW_WISE, "adam", "adagrad", kServers);
    x->plan = shard::PlanSharding(x->config, kServers);
    x->dir = testing::TempDir("fuzz_manifest");
    WriteCheckpoint(*x);
    std::ifstream in(x->dir + "/" + checkpoint::kManifestFile, std::ios::binary);
    x->clean.assign(std::istreambuf_iterator<char>(in), {});
    return x;
  }();
  return *f;
}

// What a restoring server does with the manifest.
void Restore(const Fixture& f) {
  const checkpoint::CheckpointManifest manifest = checkpoint::ManifestForRestore(f.dir, f.config);
  const bool same = checkpoint::SameLayout(manifest, kServers, 2, f.plan);
  for (int32_t server = 0; server < kServers; ++server) {
    ps::EmbeddingShardStore store(f.config, f.plan, server);
    if (same) {
      ps::LoadShardStore(&store, server, f.dir + "/" + checkpoint::ServerShardFile(server));
    } else {
      ps::LoadReshardedStore(&store, f.dir, manifest, f.config.model());
    }
  }
}

}  // namespace
}  // namespace dlrm::fuzz

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  dlrm::fuzz::WriteSeedsIfAsked(
      argc, argv, [] { return std::vector<std::string>{dlrm::fuzz::TheFixture().clean}; });
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace dlrm::fuzz;
  const Fixture& f = TheFixture();
  std::string file(reinterpret_cast<const char*>(data), size);
  SealCheckpointFile(&file);
  std::ofstream(f.dir + "/" + dlrm::checkpoint::kManifestFile, std::ios::binary | std::ios::trunc)
      << file;
  RefusedOrDone([&] { dlrm::checkpoint::ReadManifest(f.dir); });
  RefusedOrDone([&] { Restore(f); });
  return 0;
}

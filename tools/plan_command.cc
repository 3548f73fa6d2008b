// dlrm plan: how a config's embedding tables are split over N embedding servers, or over N
// trainers that own the shards (--servers=0 --trainers=N; engine/shard/planner.h), with
// every shard, per-owner totals and the imbalance.
#include <gflags/gflags.h>
#include <google/protobuf/text_format.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>

#include "engine/config/config.h"
#include "engine/core/status.h"
#include "engine/core/stopwatch.h"
#include "engine/shard/planner.h"
#include "tools/commands.h"

// One flag namespace per binary: --config and --batch_size are defined with train.
DECLARE_string(config);
DECLARE_int64(batch_size);
DECLARE_int32(trainers);
DEFINE_int32(servers, 0,
             "plan, launch: number of embedding servers (launch: 0, the trainers own the "
             "embedding shards)");
DEFINE_bool(print_shards, true, "plan: print every shard (false: per-server totals only)");
DEFINE_string(plan_out, "", "plan: also write the plan here as ShardingPlan protobuf text");

namespace dlrm::tools {
namespace {

// Bytes in binary units, e.g. "40.00 GiB".
std::string Bytes(double bytes) {
  static const char* const kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  int unit = 0;
  while (bytes >= 1024 && unit < 6) {
    bytes /= 1024;
    ++unit;
  }
  char text[32];
  std::snprintf(text, sizeof(text), unit == 0 ? "%.0f %s" : "%.2f %s", bytes, kUnits[unit]);
  return text;
}

std::string Range(int64_t begin, int64_t end) {
  return "[" + std::to_string(begin) + ", " + std::to_string(end) + ")";
}

// owner: "server", or "trainer" when the trainers own the shards.
void PrintPlan(const shard::ShardingPlan& plan, const config::DlrmConfig& config,
               const char* owner) {
  int replicated = 0;
  for (const auto& shard : plan.shards())
    replicated += shard.type() == config::ShardingConfig::DATA_PARALLEL;
  std::printf(
      "plan: %d tables, %d %ss, batch %lld, sparse optimizer %s; load = estimated ms "
      "per step\n",
      config.model().tables_size(), plan.num_servers(), owner,
      static_cast<long long>(plan.batch_size()), OptimizerName(config.sparse_optimizer()).c_str());
  if (FLAGS_print_shards) {
    std::printf("%-16s %-4s %7s %-30s %-12s %12s %10s\n", "table", "type", owner, "rows", "columns",
                "memory", "load_ms");
    for (const auto& shard : plan.shards()) {
      const std::string server = shard.has_server() ? std::to_string(shard.server()) : "-";
      std::printf("%-16s %-4s %7s %-30s %-12s %12s %10.4f\n", shard.table().c_str(),
                  shard::ShardingTypeShortName(shard.type()), server.c_str(),
                  Range(shard.row_begin(), shard.row_end()).c_str(),
                  Range(shard.col_begin(), shard.col_end()).c_str(),
                  Bytes(static_cast<double>(shard.memory_bytes())).c_str(), shard.load() * 1e3);
    }
  }
  std::printf("%-7s %7s %12s %10s\n", owner, "shards", "memory", "load_ms");
  double total_load = 0, total_memory = 0, max_load = 0, max_memory = 0;
  for (const auto& server : plan.servers()) {
    std::printf("%-7d %7d %12s %10.4f\n", server.server(), server.num_shards(),
                Bytes(static_cast<double>(server.memory_bytes())).c_str(), server.load() * 1e3);
    total_load += server.load();
    total_memory += static_cast<double>(server.memory_bytes());
    max_load = std::max(max_load, server.load());
    max_memory = std::max(max_memory, static_cast<double>(server.memory_bytes()));
  }
  const double n = plan.num_servers();
  std::printf("data-parallel: %d tables replicated on every trainer: memory %s, load %.4f ms\n",
              replicated, Bytes(static_cast<double>(plan.trainer_memory_bytes())).c_str(),
              plan.trainer_load() * 1e3);
  std::printf("%ss: total memory %s, total load %.4f ms\n", owner, Bytes(total_memory).c_str(),
              total_load * 1e3);
  std::printf("load imbalance (max/mean): %.4f  (max %.4f ms, mean %.4f ms)\n",
              plan.load_imbalance(), max_load * 1e3, total_load / n * 1e3);
  std::printf("memory imbalance (max/mean): %.4f  (max %s, mean %s)\n", plan.memory_imbalance(),
              Bytes(max_memory).c_str(), Bytes(total_memory / n).c_str());
}

}  // namespace

int PlanCommand() {
  if (FLAGS_config.empty() || gflags::GetCommandLineFlagInfoOrDie("servers").is_default)
    ThrowInvalid(
        "plan needs --config and --servers (0: the trainers own the shards, as many "
        "as --trainers)");
  const bool trainers_own = FLAGS_servers == 0;
  const int32_t owners = trainers_own ? FLAGS_trainers : FLAGS_servers;
  if (owners < 1 || owners > shard::kMaxServers)
    ThrowInvalid(trainers_own ? "--trainers" : "--servers", " must be in [1, ", shard::kMaxServers,
                 "], got ", owners);
  config::DlrmConfig config = LoadConfigFile(FLAGS_config);
  // --batch_size is shared with train (default 2048): only an explicit one overrides the
  // config's sharding.batch_size.
  if (!gflags::GetCommandLineFlagInfoOrDie("batch_size").is_default) {
    if (FLAGS_batch_size <= 0) ThrowInvalid("--batch_size must be > 0, got ", FLAGS_batch_size);
    config.mutable_sharding()->set_batch_size(FLAGS_batch_size);
  }
  const auto start = Clock::now();
  const shard::ShardingPlan plan = shard::PlanSharding(
      config, owners, trainers_own ? shard::ShardOwners::kTrainers : shard::ShardOwners::kServers);
  const double seconds = SecondsSince(start);
  PrintPlan(plan, config, trainers_own ? "trainer" : "server");
  std::printf("planned %d shards in %.3f s\n", plan.shards_size(), seconds);
  if (!FLAGS_plan_out.empty()) {
    std::string text;
    google::protobuf::TextFormat::PrintToString(plan, &text);
    std::ofstream out(FLAGS_plan_out, std::ios::binary | std::ios::trunc);
    out << text;
    out.close();
    if (!out) Throw(StatusCode::kIo, "cannot write plan to \"", FLAGS_plan_out, "\"");
  }
  return 0;
}

}  // namespace dlrm::tools

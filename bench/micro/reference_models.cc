#include <cstdlib>
#include <string>
#include <vector>

#include "bench/micro/micro_bench.h"
#include "engine/config/config.h"

namespace dlrm::bench {

std::vector<ReferenceModel> LoadReferenceModels() {
  const char* env = std::getenv("DLRM_BENCH_CONFIG_DIR");
  const std::string dir = env != nullptr && *env != '\0' ? env : DLRM_BENCH_CONFIG_DIR;
  // Batch and bag sizes as in the `dlrm bench` line at the top of each config.
  struct Entry {
    const char* name;
    int64_t batch_size;
    int32_t bag_size;
  };
  const Entry entries[] = {{"small", 2048, 1}, {"multihot", 1024, 10}};
  std::vector<ReferenceModel> models;
  for (const Entry& e : entries) {
    ReferenceModel model;
    model.name = e.name;
    model.config = LoadConfigFile(dir + "/" + e.name + ".pbtxt");
    ValidateConfig(model.config);
    model.batch_size = e.batch_size;
    model.bag_size = e.bag_size;
    models.push_back(std::move(model));
  }
  return models;
}

}  // namespace dlrm::bench

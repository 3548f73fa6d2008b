// dlrm generate: synthetic Criteo-like data whose labels come from a planted model.
#include <gflags/gflags.h>
#include <glog/logging.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "engine/core/status.h"
#include "engine/data/synthetic.h"
#include "tools/commands.h"

DEFINE_string(out_dir, "demo_data", "directory for train.tsv, test.tsv and their .bayes_auc");
DEFINE_int64(train_samples, 4000000, "training samples to write");
DEFINE_int64(test_samples, 200000, "test samples to write (drawn after the training ones)");
DEFINE_uint64(seed, 1, "generator seed");
DEFINE_double(zipf, 1.2, "Zipf exponent of each categorical feature's ids");
DEFINE_bool(raw_ids, false,
            "write each id spread over the 64-bit range (a fixed bijection per feature, 16 hex "
            "digits) for DYNAMIC tables; the samples and labels are otherwise the same");
DEFINE_string(cardinalities,
              "1000,583,1000,1000,305,24,1000,633,3,1000,1000,1000,1000,27,1000,1000,10,"
              "1000,1000,4,1000,18,15,1000,105,1000",
              "26 comma-separated table sizes (Criteo Kaggle's cardinalities capped at 1000)");

namespace dlrm::tools {
namespace {

std::vector<int64_t> ParseList(const std::string& text) {
  std::vector<int64_t> values;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    try {
      size_t used = 0;
      values.push_back(std::stoll(item, &used));
      if (used != item.size()) throw std::invalid_argument(item);
    } catch (const std::exception&) {
      ThrowInvalid("--cardinalities: \"", item, "\" is not an integer");
    }
  }
  return values;
}

void WriteText(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  if (!out) Throw(StatusCode::kIo, "cannot write \"", path, "\"");
}

}  // namespace

int GenerateCommand() {
  if (FLAGS_train_samples <= 0 || FLAGS_test_samples <= 0)
    ThrowInvalid("--train_samples and --test_samples must be > 0");
  SyntheticSpec spec;
  spec.seed = FLAGS_seed;
  spec.zipf_exponent = FLAGS_zipf;
  spec.cardinalities = ParseList(FLAGS_cardinalities);
  spec.raw_ids = FLAGS_raw_ids;
  const SyntheticGenerator generator(spec);
  std::filesystem::create_directories(FLAGS_out_dir);
  const std::string train = FLAGS_out_dir + "/train.tsv";
  const std::string test = FLAGS_out_dir + "/test.tsv";
  const double train_auc = generator.WriteTsv(train, 0, FLAGS_train_samples);
  const double test_auc = generator.WriteTsv(test, FLAGS_train_samples, FLAGS_test_samples);
  char line[64];
  std::snprintf(line, sizeof line, "%.6f\n", test_auc);
  WriteText(test + ".bayes_auc", line);
  std::snprintf(line, sizeof line, "%.6f\n", train_auc);
  WriteText(train + ".bayes_auc", line);
  LOG(INFO) << "wrote " << FLAGS_train_samples << " samples to " << train << " (Bayes-optimal AUC "
            << train_auc << ") and " << FLAGS_test_samples << " to " << test
            << " (Bayes-optimal AUC " << test_auc << ")";
  std::printf("bayes_optimal_auc_test=%.6f\n", test_auc);
  return 0;
}

}  // namespace dlrm::tools

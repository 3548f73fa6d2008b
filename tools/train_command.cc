// dlrm train / dlrm eval: train on Criteo-format TSV with progress, evaluate, save.
#include <gflags/gflags.h>
#include <glog/logging.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "engine/config/config.h"
#include "engine/core/status.h"
#include "engine/core/stopwatch.h"
#include "engine/data/criteo_tsv.h"
#include "engine/data/prefetcher.h"
#include "engine/engine.h"
#include "tools/commands.h"
#include "tools/train_data.h"

DEFINE_string(config, "", "model config (protobuf text), for train");
DEFINE_string(train, "", "training data, Criteo TSV");
DEFINE_string(test, "", "evaluation data, Criteo TSV (optional for train)");
DEFINE_int64(batch_size, 2048, "samples per training step");
DEFINE_int64(eval_batch_size, 8192, "samples per evaluation batch");
DEFINE_int32(epochs, 1, "passes over the training data");
DEFINE_int32(threads, -1, "compute threads; -1 keeps the config's num_threads");
DEFINE_string(save, "", "write a checkpoint here after training");
DEFINE_string(checkpoint, "", "checkpoint to evaluate, for eval");
DEFINE_double(log_every_seconds, 5.0, "seconds between progress lines");
DEFINE_bool(skip_malformed, false, "skip and count malformed TSV lines instead of failing");

namespace dlrm::tools {
namespace {

int64_t CountLines(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) Throw(StatusCode::kIo, "cannot open \"", path, "\"");
  std::vector<char> buffer(1 << 20);
  int64_t lines = 0;
  while (in) {
    in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
    for (std::streamsize i = 0; i < in.gcount(); ++i) lines += buffer[i] == '\n';
  }
  return lines;
}

EvalResult EvaluateFile(const Engine& engine, const std::string& path) {
  const std::vector<OwnedBatch> batches =
      LoadBatches(path, engine.config(), FLAGS_eval_batch_size, FLAGS_skip_malformed);
  return engine.Evaluate(ViewsOf(batches));
}

}  // namespace

int TrainCommand() {
  if (DistributedRoleFromEnvironment()) return DistributedTrainCommand();
  if (FLAGS_config.empty() || FLAGS_train.empty()) ThrowInvalid("train needs --config and --train");
  if (FLAGS_batch_size <= 0) ThrowInvalid("--batch_size must be > 0");
  config::DlrmConfig config = LoadConfigFile(FLAGS_config);
  if (FLAGS_threads >= 0) config.set_num_threads(FLAGS_threads);
  Engine engine(config);
  const int64_t lines = CountLines(FLAGS_train);
  const int64_t total_steps = FLAGS_epochs * ((lines + FLAGS_batch_size - 1) / FLAGS_batch_size);
  LOG(INFO) << "training on " << FLAGS_train << ": " << lines << " samples x " << FLAGS_epochs
            << " epochs, batch " << FLAGS_batch_size << ", " << engine.num_threads() << " threads";

  const auto start = Clock::now();
  auto last_log = start;
  int64_t samples = 0, step = 0, window_steps = 0;
  double window_loss = 0;
  for (int epoch = 0; epoch < FLAGS_epochs; ++epoch) {
    auto reader = std::make_shared<CriteoTsvReader>(
        FLAGS_train, ReaderOptions(config, FLAGS_batch_size, FLAGS_skip_malformed));
    Prefetcher prefetch([reader](OwnedBatch* b) { return reader->Next(b); }, 4);
    OwnedBatch batch;
    while (prefetch.Next(&batch)) {
      window_loss += engine.TrainStep(batch.view());
      ++window_steps;
      ++step;
      samples += batch.batch_size;
      if (SecondsSince(last_log) >= FLAGS_log_every_seconds) {
        const double elapsed = SecondsSince(start);
        const double eta = elapsed / step * (total_steps - step);
        std::printf("step %lld/%lld  epoch %d  samples/s %.0f  loss %.5f  eta %.0fs\n",
                    static_cast<long long>(step), static_cast<long long>(total_steps), epoch,
                    samples / elapsed, window_loss / window_steps, eta);
        std::fflush(stdout);
        window_loss = 0;
        window_steps = 0;
        last_log = Clock::now();
      }
    }
    if (reader->lines_skipped() > 0)
      LOG(WARNING) << "skipped " << reader->lines_skipped() << " malformed lines";
  }
  const double elapsed = SecondsSince(start);
  std::printf("trained %lld steps, %lld samples in %.1fs: %.0f samples/s\n",
              static_cast<long long>(step), static_cast<long long>(samples), elapsed,
              samples / elapsed);
  ReportDynamicTables(engine);
  if (!FLAGS_save.empty()) {
    engine.Save(FLAGS_save);
    LOG(INFO) << "saved checkpoint " << FLAGS_save;
  }
  if (!FLAGS_test.empty()) ReportEval(FLAGS_test, EvaluateFile(engine, FLAGS_test));
  return 0;
}

int EvalCommand() {
  if (FLAGS_checkpoint.empty() || FLAGS_test.empty())
    ThrowInvalid("eval needs --checkpoint and --test");
  const std::unique_ptr<Engine> engine = Engine::FromCheckpoint(FLAGS_checkpoint);
  ReportEval(FLAGS_test, EvaluateFile(*engine, FLAGS_test));
  return 0;
}

}  // namespace dlrm::tools

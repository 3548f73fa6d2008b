// dlrm train / dlrm eval: train on Criteo-format TSV with progress, evaluate, save.
#include <gflags/gflags.h>
#include <glog/logging.h>

#include <chrono>
#include <cstdio>
#include <deque>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <utility>
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
DECLARE_string(device);

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

// Keeps Engine::kAsyncQueueDepth training steps queued, as a pipeline feeding the engine
// does: SubmitTrainStep validates and copies a batch while the step before it runs (on a
// GPU the next batch is also copied to the device during that step: 1.9x the samples/s of
// TrainStep on `small`, H200), and the results are bitwise TrainStep's in the same order.
// A step's error (a diverged step) is thrown by the Submit or Finish that waits for it;
// steps still queued then end with the engine (Engine drains its queue when destroyed).
class StepPipeline {
 public:
  // done(samples, loss) is called for each finished step, in order.
  StepPipeline(Engine* engine, std::function<void(int64_t, double)> done)
      : engine_(*engine), done_(std::move(done)) {}
  void Submit(const BatchView& batch) {
    if (queued_.size() == Engine::kAsyncQueueDepth) WaitOldest();
    queued_.push_back({engine_.SubmitTrainStep(batch), batch.batch_size});
  }
  void Finish() {
    while (!queued_.empty()) WaitOldest();
  }

 private:
  struct Queued {
    int64_t ticket = 0, samples = 0;
  };
  void WaitOldest() {
    const Queued q = queued_.front();
    queued_.pop_front();
    done_(q.samples, engine_.WaitTrainStep(q.ticket));
  }

  Engine& engine_;
  const std::function<void(int64_t, double)> done_;
  std::deque<Queued> queued_;
};

// Progress of a training run: a line every --log_every_seconds, the total at the end.
class TrainProgress {
 public:
  explicit TrainProgress(int64_t total_steps) : total_steps_(total_steps) {}

  void StepDone(int64_t samples, double loss, int epoch) {
    window_loss_ += loss;
    ++window_steps_;
    ++step_;
    samples_ += samples;
    if (SecondsSince(last_log_) < FLAGS_log_every_seconds) return;
    const double elapsed = SecondsSince(start_);
    const double eta =
        elapsed / static_cast<double>(step_) * static_cast<double>(total_steps_ - step_);
    std::printf("step %lld/%lld  epoch %d  samples/s %.0f  loss %.5f  eta %.0fs\n",
                static_cast<long long>(step_), static_cast<long long>(total_steps_), epoch,
                static_cast<double>(samples_) / elapsed, window_loss_ / window_steps_, eta);
    std::fflush(stdout);
    window_loss_ = 0;
    window_steps_ = 0;
    last_log_ = Clock::now();
  }
  void PrintTotal() const {
    const double elapsed = SecondsSince(start_);
    std::printf("trained %lld steps, %lld samples in %.1fs: %.0f samples/s\n",
                static_cast<long long>(step_), static_cast<long long>(samples_), elapsed,
                static_cast<double>(samples_) / elapsed);
  }

 private:
  const int64_t total_steps_;
  const Clock::time_point start_ = Clock::now();
  Clock::time_point last_log_ = start_;
  int64_t samples_ = 0, step_ = 0, window_steps_ = 0;
  double window_loss_ = 0;
};

// One pass over --train, its batches read ahead on a thread and trained through the
// pipeline.
void TrainEpoch(const config::DlrmConfig& config, int epoch, Engine* engine,
                TrainProgress* progress) {
  auto reader = std::make_shared<CriteoTsvReader>(
      FLAGS_train, ReaderOptions(config, FLAGS_batch_size, FLAGS_skip_malformed));
  Prefetcher prefetch([reader](OwnedBatch* b) { return reader->Next(b); }, 4);
  StepPipeline pipeline(
      engine, [&](int64_t samples, double loss) { progress->StepDone(samples, loss, epoch); });
  OwnedBatch batch;
  while (prefetch.Next(&batch)) pipeline.Submit(batch.view());  // copied: `batch` is reused
  pipeline.Finish();
  if (reader->lines_skipped() > 0)
    LOG(WARNING) << "skipped " << reader->lines_skipped() << " malformed lines";
}

}  // namespace

int TrainCommand() {
  if (DistributedRoleFromEnvironment()) return DistributedTrainCommand();
  if (FLAGS_config.empty() || FLAGS_train.empty()) ThrowInvalid("train needs --config and --train");
  if (FLAGS_batch_size <= 0) ThrowInvalid("--batch_size must be > 0");
  config::DlrmConfig config = LoadConfigFile(FLAGS_config);
  if (FLAGS_threads >= 0) config.set_num_threads(FLAGS_threads);
  if (!FLAGS_device.empty()) SetDeviceByName(FLAGS_device, "--device", config.mutable_device());
  Engine engine(config);
  const int64_t lines = CountLines(FLAGS_train);
  const int64_t total_steps = FLAGS_epochs * ((lines + FLAGS_batch_size - 1) / FLAGS_batch_size);
  LOG(INFO) << "training on " << FLAGS_train << ": " << lines << " samples x " << FLAGS_epochs
            << " epochs, batch " << FLAGS_batch_size << ", " << engine.num_threads() << " threads";
  TrainProgress progress(total_steps);
  for (int epoch = 0; epoch < FLAGS_epochs; ++epoch) TrainEpoch(config, epoch, &engine, &progress);
  progress.PrintTotal();
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
  const std::unique_ptr<Engine> engine = Engine::FromCheckpoint(FLAGS_checkpoint, FLAGS_device);
  ReportEval(FLAGS_test, EvaluateFile(*engine, FLAGS_test));
  return 0;
}

}  // namespace dlrm::tools

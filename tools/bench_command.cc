// dlrm bench: end-to-end training and prediction throughput of a model config on
// synthetic batches (tools/bench_data.h), for comparing builds and machines.
//
// Data generation is not timed: a pool of batches is generated up front and cycled. After
// a warm-up (first-touch page faults, allocator growth, caches), the timed steps are cut
// into windows and each window's samples/s is measured on its own; the median is the
// headline number because it ignores a window disturbed by other load on the machine,
// and min/max show how much the windows disagree.
#include <gflags/gflags.h>
#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "engine/config/config.h"
#include "engine/core/cpu_features.h"
#include "engine/core/status.h"
#include "engine/core/stopwatch.h"
#include "engine/engine.h"
#include "tools/bench_data.h"
#include "tools/commands.h"
#include "tools/train_data.h"

// Shared with `train` and `generate` (a gflags flag is defined once per program).
DECLARE_string(config);
DECLARE_int64(batch_size);
DECLARE_int32(threads);
DECLARE_double(zipf);
DECLARE_uint64(seed);

DEFINE_int64(steps, 100, "bench: timed steps (train steps, and as many predict calls)");
DEFINE_int32(bag_size, 1,
             "bench: ids in every bag of every sparse feature; -1: each feature's "
             "pooling_factor (MLPerf DLRM-DCNv2's multi-hot sizes)");
DEFINE_int64(max_rows, 0,
             "bench: caps every table's rows (0: as the config says), so a config of "
             "production-sized tables fits this machine");
DEFINE_int32(windows, 5, "bench: timing windows the steps are split into (median reported)");
DEFINE_int32(warmup, 5, "bench: untimed train steps and predict calls before timing");
DEFINE_int32(pool_batches, 16, "bench: distinct pre-generated batches, used round robin");
DEFINE_string(device, "",
              "bench, train and eval: cpu, cuda or cuda:N (the CUDA device ordinal; a "
              "multi-process trainer's cuda:local is its DLRM_LOCAL_RANK, and the flag "
              "overrides DLRM_DEVICE); default: the config's (eval: the checkpoint's) device");
DEFINE_bool(cuda_graph, true,
            "bench: on a CUDA device, replay each step of a repeated batch shape as one CUDA "
            "graph (device.cuda_graph); false launches every step's kernels one by one");
DEFINE_string(matmul_precision, "",
              "bench: the dense layers' matmul precision (device.matmul_precision): highest "
              "(fp32), high (TF32, CUDA) or medium (bf16: CUDA, or a CPU with AVX512-BF16, on AMX "
              "tiles where it has them), as "
              "PyTorch's set_float32_matmul_precision; empty keeps the config's");
DEFINE_string(optimizer, "",
              "bench: replace the config's optimizers (learning rates kept): sgd, adagrad "
              "(dense and sparse Adagrad) or rowwise_adagrad (dense Adagrad, row-wise sparse); "
              "empty keeps the config's");
DEFINE_string(table_precision, "",
              "bench: every table's rows in fp32, bf16 or fp16 (TableConfig.precision); empty "
              "keeps the config's");
DEFINE_string(rounding, "",
              "bench: with --table_precision bf16 or fp16, how updates are narrowed: nearest "
              "or stochastic (TableConfig.rounding); empty: nearest");
DEFINE_string(async_host, "",
              "bench: also time the asynchronous path (SubmitTrainStep/WaitTrainStep) with a "
              "host that prepares each batch for prepare_factor x the measured train time: "
              "'sleep' (waits, as for I/O or a remote feature pipeline) or 'spin' (computes "
              "on a core of its own, competing with the engine's threads)");
DEFINE_double(prepare_factor, 1.0, "bench: host preparation time / train time for --async_host");
DEFINE_int32(async_ahead, 2,
             "bench: --async_host's steps submitted ahead of the one waited for (1: prepare "
             "batch i + 1 while batch i trains; 2: the engine's queue kept full, so the step "
             "running always knows the next batch and a GPU copies it in meanwhile)");
DEFINE_int32(predict_threads, 0,
             "bench: also time training while this many threads predict in a loop (a serving "
             "process that trains online); 0 skips it");

namespace dlrm::tools {
namespace {

struct WindowStats {
  double median = 0, min = 0, max = 0;
};

WindowStats Summarize(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  WindowStats stats;
  stats.min = values.front();
  stats.max = values.back();
  stats.median = n % 2 == 1 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
  return stats;
}

std::string CpuModel() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  // x86 says "model name"; some ARM kernels only "Hardware" or "CPU part".
  for (const char* key : {"model name", "Hardware"}) {
    in.clear();
    in.seekg(0);
    while (std::getline(in, line)) {
      if (line.compare(0, std::string(key).size(), key) != 0) continue;
      const size_t colon = line.find(':');
      if (colon == std::string::npos) continue;
      const size_t start = line.find_first_not_of(" \t", colon + 1);
      if (start != std::string::npos) return line.substr(start);
    }
  }
  return "unknown CPU";
}

// Cores this process may run on (cgroup/taskset limits), which can be fewer than the
// machine's logical cores; 0 if unknown.
int UsableCores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return 0;
  return CPU_COUNT(&set);
}

double PeakRssGb() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) * 1024.0 / 1e9;  // ru_maxrss is in KiB
}

// CPU seconds the whole machine spent busy (user, nice, system, irq, softirq, steal) and
// that this process used, so that the bench can say how much of the machine other
// processes took while it was timing: on a shared machine that is what makes a run
// trustworthy or not. busy is negative where /proc/stat cannot be read.
struct CpuTimes {
  double busy = -1;
  double own = 0;
};

CpuTimes ReadCpuTimes() {
  CpuTimes t;
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  t.own = static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
          1e-6 * static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec);
  std::ifstream stat("/proc/stat");
  std::string cpu;
  long long user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0, steal = 0;
  if (stat >> cpu >> user >> nice >> system >> idle >> iowait >> irq >> softirq >> steal &&
      cpu == "cpu") {
    const long ticks = sysconf(_SC_CLK_TCK);
    if (ticks > 0)
      t.busy = static_cast<double>(user + nice + system + irq + softirq + steal) /
               static_cast<double>(ticks);
  }
  return t;
}

// Average number of cores used by everything but this process between two readings.
double OtherCores(const CpuTimes& begin, const CpuTimes& end, double wall_seconds) {
  if (begin.busy < 0 || end.busy < 0 || wall_seconds <= 0) return -1;
  const double other = (end.busy - begin.busy) - (end.own - begin.own);
  return std::max(0.0, other) / wall_seconds;
}

// Runs `windows` windows of `per_window` calls of step(i) (i counts on across windows)
// and returns each window's samples/s.
template <typename Step>
std::vector<double> TimeWindows(int windows, int64_t per_window, int64_t batch_size, int64_t* next,
                                Step step) {
  std::vector<double> rates;
  for (int w = 0; w < windows; ++w) {
    const auto start = Clock::now();
    for (int64_t i = 0; i < per_window; ++i) step((*next)++);
    const double seconds = Seconds(Clock::now() - start);
    rates.push_back(static_cast<double>(per_window * batch_size) / seconds);
  }
  return rates;
}

// Host time per step by phase over some windows (Engine::step_phases before and after),
// the phases of no time left out; `label` is the line's first word.
void PrintPhases(const char* label, const StepPhases& begin, const StepPhases& end) {
  const int64_t steps = end.steps - begin.steps;
  if (steps <= 0 || begin.phases.size() != end.phases.size()) return;
  std::string line;
  for (size_t i = 0; i < end.phases.size(); ++i) {
    const double ms = 1e3 * (end.phases[i].seconds - begin.phases[i].seconds) / steps;
    if (ms < 0.0005) continue;
    char part[96];
    std::snprintf(part, sizeof part, "%s%s %.3f", line.empty() ? "" : ", ",
                  end.phases[i].name.c_str(), ms);
    line += part;
  }
  std::printf("%-11s ms per train step on the host: %s\n", label, line.c_str());
}

// Train windows while `readers` threads call Predict in a loop: the train rates, and the
// predictions per second made meanwhile in *predict_rate.
template <typename View>
std::vector<double> TrainUnderPredictions(Engine& engine, const View& view, int readers,
                                          int64_t per_window, double* predict_rate) {
  std::atomic<bool> stop{false};
  std::atomic<int64_t> made{0};
  std::vector<std::thread> threads;
  for (int r = 0; r < readers; ++r) {
    threads.emplace_back([&, r] {
      std::vector<float> out(static_cast<size_t>(FLAGS_batch_size));
      for (int64_t i = r; !stop; i += readers) {
        engine.Predict(view(i), out.data(), FLAGS_batch_size);
        ++made;
      }
    });
  }
  int64_t next = 0;
  const auto start = Clock::now();
  std::vector<double> rates = TimeWindows(FLAGS_windows, per_window, FLAGS_batch_size, &next,
                                          [&](int64_t i) { engine.TrainStep(view(i)); });
  const double seconds = Seconds(Clock::now() - start);
  const int64_t predictions = made;
  stop = true;
  for (std::thread& t : threads) t.join();
  *predict_rate = static_cast<double>(predictions * FLAGS_batch_size) / seconds;
  return rates;
}

void PrintRates(const char* what, const WindowStats& s, int64_t batch_size) {
  std::printf("%-11s samples/s  median %.0f  min %.0f  max %.0f   (%.2f ms/batch)\n", what,
              s.median, s.min, s.max, 1e3 * static_cast<double>(batch_size) / s.median);
}

void ApplyOptimizerFlag(const std::string& kind, config::DlrmConfig* config) {
  if (kind.empty()) return;
  config::DenseOptimizerConfig* dense = config->mutable_dense_optimizer();
  config::SparseOptimizerConfig* sparse = config->mutable_sparse_optimizer();
  if (kind == "sgd") {
    dense->mutable_sgd();
    sparse->mutable_sgd();
  } else if (kind == "adagrad") {
    dense->mutable_adagrad();
    sparse->mutable_adagrad();
  } else if (kind == "rowwise_adagrad") {
    dense->mutable_adagrad();
    sparse->mutable_rowwise_adagrad();
  } else {
    ThrowInvalid("--optimizer must be sgd, adagrad or rowwise_adagrad, got '", kind, "'");
  }
}

// --table_precision and --rounding: every table's rows in that precision, rounded so.
void ApplyTablePrecisionFlags(const std::string& precision, const std::string& rounding,
                              config::DlrmConfig* config) {
  if (precision.empty()) {
    if (!rounding.empty()) ThrowInvalid("--rounding needs --table_precision bf16 or fp16");
    return;
  }
  const config::TableConfig::Precision p = PrecisionFlag(
      "--table_precision", precision,
      {config::TableConfig::FP32, config::TableConfig::BF16, config::TableConfig::FP16});
  config::TableConfig::Rounding r = config::TableConfig::NEAREST;
  if (!rounding.empty() && rounding != "nearest") {
    if (rounding != "stochastic")
      ThrowInvalid("--rounding must be nearest or stochastic, got '", rounding, "'");
    r = config::TableConfig::STOCHASTIC;
  }
  if (p == config::TableConfig::FP32 && !rounding.empty())
    ThrowInvalid("--rounding needs --table_precision bf16 or fp16");
  for (auto& table : *config->mutable_model()->mutable_tables()) {
    table.set_precision(p);
    if (p == config::TableConfig::FP32)
      table.clear_rounding();
    else
      table.set_rounding(r);
  }
}

// --cuda_graph, for a CUDA device only (the CPU has no graphs to turn off), and
// --matmul_precision (the config and the model say which precisions the device has).
void ApplyCudaFlags(bool graph, const std::string& precision, config::DlrmConfig* config) {
  const bool cuda = config->device().kind() == config::DeviceConfig::CUDA;
  if (cuda)
    config->mutable_device()->set_cuda_graph(graph);
  else if (!graph)
    ThrowInvalid("--cuda_graph=false needs a CUDA device (--device cuda)");
  if (precision.empty()) return;
  std::string name = precision;
  std::transform(name.begin(), name.end(), name.begin(),
                 [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
  config::DeviceConfig::MatmulPrecision value;
  if (!config::DeviceConfig::MatmulPrecision_Parse(name, &value))
    ThrowInvalid("--matmul_precision must be highest, high or medium, got '", precision, "'");
  config->mutable_device()->set_matmul_precision(value);
}

// What a host does between two submissions, for `duration` seconds.
void Prepare(const std::string& how, double duration) {
  const auto until = Clock::now() + std::chrono::duration<double>(duration);
  if (how == "sleep") {
    std::this_thread::sleep_until(until);
    return;
  }
  volatile uint64_t sink = 0;  // spin: real work on the host's own thread
  while (Clock::now() < until) {
    for (int i = 0; i < 1000; ++i) sink = sink + static_cast<uint64_t>(i);
  }
}

void CheckBenchFlags() {
  if (FLAGS_config.empty()) ThrowInvalid("bench needs --config");
  if (FLAGS_batch_size <= 0) ThrowInvalid("--batch_size must be > 0, got ", FLAGS_batch_size);
  if (FLAGS_bag_size < kBagsFromConfig)
    ThrowInvalid("--bag_size must be >= 0, or -1 for the config's pooling factors, got ",
                 FLAGS_bag_size);
  if (FLAGS_max_rows < 0) ThrowInvalid("--max_rows must be >= 0, got ", FLAGS_max_rows);
  if (FLAGS_windows <= 0) ThrowInvalid("--windows must be > 0, got ", FLAGS_windows);
  if (FLAGS_steps < FLAGS_windows)
    ThrowInvalid("--steps (", FLAGS_steps, ") must be >= --windows (", FLAGS_windows, ")");
  if (FLAGS_warmup < 0) ThrowInvalid("--warmup must be >= 0, got ", FLAGS_warmup);
  if (FLAGS_pool_batches <= 0) ThrowInvalid("--pool_batches must be > 0, got ", FLAGS_pool_batches);
  if (!FLAGS_async_host.empty() && FLAGS_async_host != "sleep" && FLAGS_async_host != "spin")
    ThrowInvalid("--async_host must be sleep or spin, got '", FLAGS_async_host, "'");
  if (!(FLAGS_prepare_factor >= 0 && FLAGS_prepare_factor <= 100))
    ThrowInvalid("--prepare_factor must be in [0, 100], got ", FLAGS_prepare_factor);
  if (FLAGS_async_ahead < 1 || FLAGS_async_ahead > static_cast<int>(Engine::kAsyncQueueDepth))
    ThrowInvalid("--async_ahead must be in [1, ", Engine::kAsyncQueueDepth, "], got ",
                 FLAGS_async_ahead);
  if (FLAGS_predict_threads < 0 || FLAGS_predict_threads > 256)
    ThrowInvalid("--predict_threads must be in [0, 256], got ", FLAGS_predict_threads);
}

// --config with the flags that change it applied.
config::DlrmConfig BenchConfig() {
  config::DlrmConfig config = LoadConfigFile(FLAGS_config);
  if (FLAGS_threads >= 0) config.set_num_threads(FLAGS_threads);
  ApplyOptimizerFlag(FLAGS_optimizer, &config);
  ApplyTablePrecisionFlags(FLAGS_table_precision, FLAGS_rounding, &config);
  for (auto& table : *config.mutable_model()->mutable_tables())
    if (FLAGS_max_rows > 0 && table.num_rows() > FLAGS_max_rows) table.set_num_rows(FLAGS_max_rows);
  if (!FLAGS_device.empty()) SetDeviceByName(FLAGS_device, "--device", config.mutable_device());
  ApplyCudaFlags(FLAGS_cuda_graph, FLAGS_matmul_precision, &config);
  return config;
}

// The device, threads, optimizers and model lines.
void PrintEngine(const Engine& engine, const config::DlrmConfig& config) {
  int64_t embedding_params = 0, total_params = 0;
  for (const ParameterInfo& p : engine.Parameters()) {
    total_params += p.size();
    if (p.name.rfind("embedding.", 0) == 0) embedding_params += p.size();
  }
  const config::ModelConfig& model = config.model();
  const bool cuda = config.device().kind() == config::DeviceConfig::CUDA;
  const std::string matmul =
      ", matmul " + config::DeviceConfig::MatmulPrecision_Name(config.device().matmul_precision());
  std::printf("device      %s%s%s\n", engine.device().c_str(),
              !cuda                          ? ""
              : config.device().cuda_graph() ? ", CUDA graphs"
                                             : ", eager (no graphs)",
              matmul.c_str());
  std::printf("threads     %d\n", engine.num_threads());
  std::printf("optimizers dense %s, sparse %s\n", OptimizerName(config.dense_optimizer()).c_str(),
              OptimizerName(config.sparse_optimizer()).c_str());
  int64_t table_bytes = 0;
  for (const auto& table : model.tables())
    table_bytes += engine.GetTableStats(table.name()).memory_bytes;
  std::printf(
      "model       %d dense + %d sparse features, %d tables; %lld parameters "
      "(%lld embedding), %.2f GB fp32; tables %.2f GB with optimizer state\n",
      model.num_dense_features(), model.sparse_features_size(), model.tables_size(),
      static_cast<long long>(total_params), static_cast<long long>(embedding_params),
      4e-9 * static_cast<double>(total_params), 1e-9 * static_cast<double>(table_bytes));
}

// The batches the timed loops use round robin, generated before timing.
struct BenchBatches {
  std::vector<OwnedBatch> owned;
  std::vector<BatchView> views;
  const BatchView& operator()(int64_t i) const {
    return views[static_cast<size_t>(i) % views.size()];
  }
};

BenchBatches MakeBatches(const BenchDataGenerator& generator, int threads) {
  const int64_t count = std::min<int64_t>(FLAGS_pool_batches, FLAGS_warmup + FLAGS_steps);
  const auto start = Clock::now();
  BenchBatches b;
  b.owned = generator.Batches(count, threads);
  b.views = ViewsOf(b.owned);
  char ids[32] = "uniform ids";
  if (FLAGS_zipf > 0) std::snprintf(ids, sizeof ids, "zipf %g ids", FLAGS_zipf);
  std::printf(
      "data        batch_size %lld, bag_size %s (%lld ids/batch), %s, pool of %lld "
      "batches (generated in %.2f s, not timed)\n",
      static_cast<long long>(FLAGS_batch_size),
      FLAGS_bag_size == kBagsFromConfig ? "per feature" : std::to_string(FLAGS_bag_size).c_str(),
      static_cast<long long>(b.views[0].num_ids), ids, static_cast<long long>(count),
      SecondsSince(start));
  return b;
}

// What the timed loops measured.
struct BenchTimes {
  std::vector<double> train, predict, async;  // samples/s per window
  StepPhases phases_begin, phases_end;        // around the train windows
  StepPhases async_begin, async_end;          // around the async windows
  double prepare_seconds = 0;                 // --async_host's per batch
  float loss = 0;
};

// Warm-up steps, then the train windows (with the step phases around them).
void TimeTrain(Engine& engine, const BenchBatches& batches, int64_t per_window, BenchTimes* t) {
  int64_t next = 0;
  for (int i = 0; i < FLAGS_warmup; ++i) t->loss = engine.TrainStep(batches(next++));
  t->phases_begin = engine.step_phases();
  t->train = TimeWindows(FLAGS_windows, per_window, FLAGS_batch_size, &next,
                         [&](int64_t i) { t->loss = engine.TrainStep(batches(i)); });
  t->phases_end = engine.step_phases();
}

void TimePredict(const Engine& engine, const BenchBatches& batches, int64_t per_window,
                 BenchTimes* t) {
  std::vector<float> probabilities(static_cast<size_t>(FLAGS_batch_size));
  const auto predict_one = [&](int64_t i) {
    engine.Predict(batches(i), probabilities.data(), FLAGS_batch_size);
  };
  int64_t next = 0;
  for (int i = 0; i < FLAGS_warmup; ++i) predict_one(next++);
  t->predict = TimeWindows(FLAGS_windows, per_window, FLAGS_batch_size, &next, predict_one);
}

// The asynchronous path with a host that prepares batch i + async_ahead while batch i
// trains: prepare, submit, then wait for the step async_ahead before it. The pipeline is
// filled and run for the warm-up steps before the windows, so that every window waits
// for as many steps as it counts, in the steady state (the first window used to count
// the fill's submissions as steps).
void TimeAsync(Engine& engine, const BenchBatches& batches, int64_t per_window, BenchTimes* t) {
  t->prepare_seconds =
      FLAGS_prepare_factor * static_cast<double>(FLAGS_batch_size) / Summarize(t->train).median;
  std::deque<int64_t> pending;
  int64_t next = 0;
  const auto submit = [&](int64_t i) {
    Prepare(FLAGS_async_host, t->prepare_seconds);
    pending.push_back(engine.SubmitTrainStep(batches(i)));
  };
  const auto step = [&](int64_t i) {
    submit(i);
    t->loss = engine.WaitTrainStep(pending.front());
    pending.pop_front();
  };
  // Read before the first submit: it waits for a running step (the engine's lock). The
  // phases are then averaged over the warm-up steps too.
  t->async_begin = engine.step_phases();
  for (int i = 0; i < FLAGS_async_ahead; ++i) submit(next++);
  for (int i = 0; i < FLAGS_warmup; ++i) step(next++);
  t->async = TimeWindows(FLAGS_windows, per_window, FLAGS_batch_size, &next, step);
  for (; !pending.empty(); pending.pop_front())  // the last steps, outside the windows
    t->loss = engine.WaitTrainStep(pending.front());
  t->async_end = engine.step_phases();
}

void PrintTimes(Engine& engine, const BenchBatches& batches, int64_t per_window,
                const BenchTimes& t, double other_cores) {
  const double train = Summarize(t.train).median;
  PrintRates("train", Summarize(t.train), FLAGS_batch_size);
  PrintPhases("phases", t.phases_begin, t.phases_end);
  PrintRates("predict", Summarize(t.predict), FLAGS_batch_size);
  if (FLAGS_predict_threads > 0) {
    double predict_rate = 0;
    const WindowStats loaded = Summarize(
        TrainUnderPredictions(engine, batches, FLAGS_predict_threads, per_window, &predict_rate));
    PrintRates("train+pred", loaded, FLAGS_batch_size);
    std::printf(
        "predicting  %d threads, %.0f samples/s meanwhile; loaded / unloaded train = %.3f\n",
        FLAGS_predict_threads, predict_rate, loaded.median / train);
  }
  if (!t.async.empty()) {
    const WindowStats a = Summarize(t.async);
    PrintRates("async", a, FLAGS_batch_size);
    PrintPhases("phases_async", t.async_begin, t.async_end);
    std::printf("async_host  %s %.2f ms per batch (%.2f x train), %d ahead; async / train = %.3f\n",
                FLAGS_async_host.c_str(), 1e3 * t.prepare_seconds, FLAGS_prepare_factor,
                FLAGS_async_ahead, a.median / train);
  }
  if (other_cores >= 0) {
    // Whatever else ran (or the hypervisor stole) competed with the timed steps. An idle
    // VM shows up to about 0.1 cores of its own daemons; a quarter core already costs a
    // 2-core machine more than the windows' usual spread.
    std::printf("background  %.2f cores used by other processes while timing%s\n", other_cores,
                other_cores > 0.25 ? " (numbers disturbed: rerun on an idle machine)" : "");
  }
}

}  // namespace

int BenchCommand() {
  CheckBenchFlags();
  CheckMaxIsa();
  const config::DlrmConfig config = BenchConfig();
  std::printf("dlrm bench  %s\n", FLAGS_config.c_str());
  std::printf("machine     %s, %u logical cores (%d usable), %s kernels%s\n", CpuModel().c_str(),
              std::thread::hardware_concurrency(), UsableCores(), IsaLevelName(CpuIsaLevel()),
              ReadMaxIsa().value != nullptr ? " (DLRM_MAX_ISA)" : "");
  std::fflush(stdout);

  // Before the engine, whose tables can take a minute to initialize: bad data flags fail fast.
  const BenchDataGenerator generator(
      BenchDataSpecFor(config.model(), FLAGS_batch_size, FLAGS_bag_size, FLAGS_zipf, FLAGS_seed));
  const auto start = Clock::now();
  Engine engine(config);  // validates the config, allocates and initializes every table
  const double build_seconds = SecondsSince(start);
  PrintEngine(engine, config);
  const BenchBatches batches = MakeBatches(generator, engine.num_threads());
  const int64_t per_window = FLAGS_steps / FLAGS_windows;
  std::printf("engine      built in %.2f s\n", build_seconds);
  std::printf("timing      warm-up %d steps; %d windows x %lld steps\n", FLAGS_warmup,
              FLAGS_windows, static_cast<long long>(per_window));
  std::fflush(stdout);

  const CpuTimes cpu_begin = ReadCpuTimes();
  const auto timed_begin = Clock::now();
  BenchTimes times;
  TimeTrain(engine, batches, per_window, &times);
  TimePredict(engine, batches, per_window, &times);
  if (!FLAGS_async_host.empty()) TimeAsync(engine, batches, per_window, &times);
  const double other_cores = OtherCores(cpu_begin, ReadCpuTimes(), SecondsSince(timed_begin));
  PrintTimes(engine, batches, per_window, times, other_cores);
  ReportDynamicTables(engine);
  std::printf("last_loss   %.5f\n", times.loss);
  std::printf("peak_rss    %.2f GB\n", PeakRssGb());
  return 0;
}

}  // namespace dlrm::tools

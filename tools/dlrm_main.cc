// `dlrm`: the command line over the engine (generate data, train, evaluate).
#include <gflags/gflags.h>
#include <glog/logging.h>

#include <cstring>
#include <iostream>
#include <string>

#include "engine/core/log.h"
#include "engine/core/status.h"
#include "tools/commands.h"

namespace {

constexpr const char* kUsage =
    "usage: dlrm <command> [--flags]\n"
    "commands:\n"
    "  generate  write synthetic Criteo-format train/test TSV files with planted labels\n"
    "  train     train a model from a config on Criteo-format TSV, evaluate, save\n"
    "  eval      evaluate a saved checkpoint on Criteo-format TSV\n"
    "  export    write a checkpoint's compact serving model (--checkpoint, --out)\n"
    "  plan      plan the sharding of a config's tables over N embedding servers\n"
    "  bench     time training and prediction of a config on synthetic batches\n"
    "  launch    run a multi-process job here: dlrm launch --trainers T --servers S -- \n"
    "            train --config ... (each process is `dlrm train` with DLRM_ROLE set)\n"
    "`dlrm <command> --help` lists a command's flags.";

// The engine's log lines go to glog, as the tool's own do (one format, one stream).
void ForwardEngineLogToGlog() {
  dlrm::SetLogSink(
      [](dlrm::LogLevel level, const char* file, int line, const std::string& message) {
        google::LogSeverity severity = google::GLOG_INFO;
        if (level == dlrm::LogLevel::kWarning) severity = google::GLOG_WARNING;
        if (level == dlrm::LogLevel::kError) severity = google::GLOG_ERROR;
        google::LogMessage(file, line, severity).stream() << message;
      },
      dlrm::LogLevel::kInfo);
}

}  // namespace

int main(int argc, char** argv) {
  gflags::SetUsageMessage(kUsage);
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "help") == 0) {
    std::cerr << kUsage << "\n";
    return argc < 2 ? 2 : 0;
  }
  const std::string command = argv[1];
  // Hand the rest of the line to gflags as if the subcommand were the program.
  argv[1] = argv[0];
  int sub_argc = argc - 1;
  char** sub_argv = argv + 1;
  gflags::ParseCommandLineFlags(&sub_argc, &sub_argv, true);
  FLAGS_logtostderr = true;
  google::InitGoogleLogging(sub_argv[0]);
  ForwardEngineLogToGlog();
  try {
    if (command == "generate") return dlrm::tools::GenerateCommand();
    if (command == "train") return dlrm::tools::TrainCommand();
    if (command == "eval") return dlrm::tools::EvalCommand();
    if (command == "export") return dlrm::tools::ExportCommand();
    if (command == "plan") return dlrm::tools::PlanCommand();
    if (command == "bench") return dlrm::tools::BenchCommand();
    if (command == "launch") {
      // What follows the launch flags (after "--") is the command every process runs.
      int first = 1;
      if (first < sub_argc && std::strcmp(sub_argv[first], "--") == 0) ++first;
      return dlrm::tools::LaunchCommand(sub_argc - first + 1, sub_argv + first - 1);
    }
  } catch (const dlrm::Error& e) {
    LOG(ERROR) << dlrm::StatusCodeName(e.code()) << ": " << e.what();
    return 1;
  } catch (const std::exception& e) {
    LOG(ERROR) << "internal error: " << e.what();
    return 1;
  }
  std::cerr << "dlrm: unknown command \"" << command << "\"\n" << kUsage << "\n";
  return 2;
}

// Subcommands of the `dlrm` command line. Each returns the process exit code.
#pragma once

#include <initializer_list>
#include <string>

#include "engine/config/dlrm.pb.h"

namespace dlrm::tools {

int GenerateCommand();
int TrainCommand();
int EvalCommand();
int ExportCommand();
int PlanCommand();
int BenchCommand();
// `dlrm launch --trainers T --servers S -- <command and flags>`: a local multi-process job.
// rest: the command line after the launch flags.
int LaunchCommand(int argc, char** argv);

// The precision a flag names (TableConfig's names in any case: fp32, bf16, int8, ...), which
// must be one of `allowed`; kInvalidArgument naming the flag and the allowed names otherwise.
config::TableConfig::Precision PrecisionFlag(
    const char* flag, const std::string& value,
    std::initializer_list<config::TableConfig::Precision> allowed);

// Whether DLRM_ROLE is set: this process is one of a multi-process job.
bool DistributedRoleFromEnvironment();
// `dlrm train` as the process DLRM_ROLE and friends say (coordinator, server or trainer).
int DistributedTrainCommand();

}  // namespace dlrm::tools

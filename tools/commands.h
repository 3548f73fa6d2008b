// Subcommands of the `dlrm` command line. Each returns the process exit code.
#pragma once

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

// Whether DLRM_ROLE is set: this process is one of a multi-process job.
bool DistributedRoleFromEnvironment();
// `dlrm train` as the process DLRM_ROLE and friends say (coordinator, server or trainer).
int DistributedTrainCommand();

}  // namespace dlrm::tools

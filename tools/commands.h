// Subcommands of the `dlrm` command line. Each returns the process exit code.
#pragma once

namespace dlrm::tools {

int GenerateCommand();
int TrainCommand();
int EvalCommand();
int PlanCommand();
int BenchCommand();

}  // namespace dlrm::tools

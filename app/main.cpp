// bitparity: one binary for the user-facing commands and the rank processes they start.

#include <string>

#include "harness/cli.h"
#include "runtime/plan_command.h"
#include "runtime/worker.h"

int main(int argc, char** argv) {
  // Rank processes are started as `bitparity worker ...` by the launcher (or by srun/torchrun).
  if (argc > 1 && std::string(argv[1]) == "worker") {
    return bitparity::WorkerMain(argc - 1, argv + 1);
  }
  bitparity::CliHooks hooks;
  hooks.print_plan = bitparity::PrintPlan;
  return bitparity::RunCli(argc, argv, hooks);
}

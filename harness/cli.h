#ifndef BITPARITY_HARNESS_CLI_H_
#define BITPARITY_HARNESS_CLI_H_

// The `bitparity` command line: subcommands, help text and exit codes.

#include <functional>
#include <string>

namespace bitparity {

// Commands whose implementation lives outside the harness (the harness never includes engine
// or model headers); the binary's main wires them in.
struct CliHooks {
  // `plan RECIPE --arm NAME [--json]`: returns the exit code.
  std::function<int(const std::string& recipe, const std::string& arm, bool json)> print_plan;
};

// Parses argv and runs the chosen subcommand; returns the process exit code.
int RunCli(int argc, char** argv, const CliHooks& hooks);

}  // namespace bitparity

#endif  // BITPARITY_HARNESS_CLI_H_

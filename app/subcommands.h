#ifndef BITPARITY_APP_SUBCOMMANDS_H_
#define BITPARITY_APP_SUBCOMMANDS_H_

// The user-facing `bitparity` subcommands as a table: each declares its options on the command
// line and runs once they are parsed. RunCli (app/cli.h) builds the application from the table;
// a new subcommand is one more Subcommand in MakeSubcommands.

#include <CLI/CLI.hpp>
#include <memory>
#include <string>
#include <vector>

namespace bitparity {

// The exit codes every subcommand's help ends with.
extern const char kExitCodesHelp[];

class Subcommand {
 public:
  virtual ~Subcommand() = default;
  // Adds the subcommand and its options to `app`; returns it.
  virtual CLI::App* Declare(CLI::App& app) = 0;
  // Runs it after a successful parse; `command_line` is the whole invocation (recorded in traces
  // and reports). Returns the exit code; errors escape as exceptions (core/errors.h).
  virtual int Execute(const std::string& command_line) = 0;
};

// Every user-facing subcommand, in the order `bitparity --help` lists them.
std::vector<std::unique_ptr<Subcommand>> MakeSubcommands();

}  // namespace bitparity

#endif  // BITPARITY_APP_SUBCOMMANDS_H_

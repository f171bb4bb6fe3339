#ifndef BITPARITY_APP_CLI_H_
#define BITPARITY_APP_CLI_H_

// The `bitparity` command line: the user-facing subcommands (run, matrix, arm, diff, plan, ...),
// their help text and exit codes, and `bitparity worker`, the rank process the launcher (or
// srun, torchrun) starts.

namespace bitparity {

// Parses argv and runs the chosen subcommand; returns the process exit code (core/errors.h).
int RunCli(int argc, char** argv);

}  // namespace bitparity

#endif  // BITPARITY_APP_CLI_H_

#ifndef BITPARITY_HARNESS_CLI_H_
#define BITPARITY_HARNESS_CLI_H_

// The `bitparity` command line: subcommands, help text and exit codes.

namespace bitparity {

// Parses argv and runs the chosen subcommand; returns the process exit code.
int RunCli(int argc, char** argv);

}  // namespace bitparity

#endif  // BITPARITY_HARNESS_CLI_H_

// bitparity: one binary for the user-facing commands and the rank processes they start.

#include <csignal>

#include "app/cli.h"

int main(int argc, char** argv) {
  // Beyond a file-size limit (`ulimit -f`) a write fails with EFBIG, which the atomic writer
  // reports like a full disk (exit 3 naming the file, no temporary left), instead of SIGXFSZ
  // killing the process halfway through a write. Rank processes inherit the ignored signal.
  std::signal(SIGXFSZ, SIG_IGN);
  return bitparity::RunCli(argc, argv);
}

// bitparity: one binary for the user-facing commands and the rank processes they start.

#include "app/cli.h"

int main(int argc, char** argv) { return bitparity::RunCli(argc, argv); }

#ifndef BITPARITY_HARNESS_MATRIX_COMMAND_H_
#define BITPARITY_HARNESS_MATRIX_COMMAND_H_

// `bitparity matrix FILE [--filter EXPR] [--jobs N] [--out DIR]`: expands a base recipe over
// axes (precision, recompute, mtp_layers, dispatcher, pipeline) and runs every cell through the
// same path as `bitparity run`. One junit.xml with a testsuite per cell, one report.json with the
// cells x checks table. Cells that cannot run (their configuration breaks a rule) are reported
// as skipped with the reason, never dropped.
//
// The matrix file format is described in config/matrix_file.h.

#include <cstdint>
#include <iosfwd>
#include <map>
#include <string>
#include <vector>

#include "config/matrix_file.h"

namespace bitparity {

struct MatrixOptions {
  std::string matrix_path;
  std::string filter;
  bool filter_given = false;  // --filter was on the command line (even as "")
  int64_t jobs = 1;
  std::string out_dir;  // default: out/<matrix name>
  int64_t repeats = 2;
  bool quiet = false;
  bool probes = false;          // node probes in every cell's traces (RunOptions::probes)
  bool require_golden = false;  // RunOptions::require_golden for every cell
  std::string command_line;
};

// Runs the selected cells; returns the exit code (0 all passed, 1 a check failed, 3 a fault).
int RunMatrix(const MatrixOptions& options, std::ostream& console);

}  // namespace bitparity

#endif  // BITPARITY_HARNESS_MATRIX_COMMAND_H_

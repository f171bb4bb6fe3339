#ifndef BITPARITY_HARNESS_MATRIX_COMMAND_H_
#define BITPARITY_HARNESS_MATRIX_COMMAND_H_

// `bitparity matrix FILE [--filter EXPR] [--jobs N] [--out DIR]`: expands a base recipe over
// axes (precision, recompute, mtp_layers, dispatcher, pipeline) and runs every cell through the
// same path as `bitparity run`. One junit.xml with a testsuite per cell, one report.json with the
// cells x checks table. Cells that cannot run (their configuration breaks a rule) are reported
// as skipped with the reason, never dropped.
//
// A matrix file:
//   [matrix]
//   base = "matrix_base.toml"            # a recipe, relative to this file
//   [matrix.axes]
//   precision = ["bf16", "blockwise", "mxfp8"]
//   recompute = ["uniform-1", "uniform-2", "block-1", "block-3"]   # or "none", "chunk"
//   mtp_layers = [0, 1]
//   dispatcher = ["alltoall", "flex"]
//   pipeline = ["pp2-vpp2", "pp4-vpp3", "uneven"]   # ppP-vppV (even split), ppP, or a layout name
//   [matrix.layouts]
//   uneven = { pp = 2, layout = "Et*5|t*7|t*6|t*6||mL" }   # Megatron's syntax
//   [matrix.filters]
//   ci = "precision=bf16|mxfp8, recompute=uniform-1"
// A filter is the name of one of [matrix.filters] or an expression of comma-separated
// `axis=value|value` terms that must all hold.

#include <cstdint>
#include <iosfwd>
#include <map>
#include <string>
#include <vector>

namespace bitparity {

struct MatrixOptions {
  std::string matrix_path;
  std::string filter;
  int64_t jobs = 1;
  std::string out_dir;  // default: out/<matrix name>
  int64_t repeats = 2;
  bool quiet = false;
  std::string command_line;
};

// One cell: its axis values and the recipe text they give.
struct MatrixCell {
  std::string name;
  std::map<std::string, std::string> values;  // axis -> value
  std::string recipe_text;
};

struct Matrix {
  std::string name;
  std::string path;
  std::string base_path;
  std::vector<std::string> axes;  // in name order (a TOML table has none); values in file order
  std::map<std::string, std::string> filters;
  std::vector<MatrixCell> cells;  // the full cartesian product, the last axis varying fastest
};

// Reads and expands a matrix file; InputError names the file and key on bad input.
Matrix LoadMatrix(const std::string& path);

// Whether `cell` passes `filter` (a filter name or an expression); InputError if malformed.
bool CellMatches(const Matrix& matrix, const MatrixCell& cell, const std::string& filter);

// Runs the selected cells; returns the exit code (0 all passed, 1 a check failed, 3 a fault).
int RunMatrix(const MatrixOptions& options, std::ostream& console);

}  // namespace bitparity

#endif  // BITPARITY_HARNESS_MATRIX_COMMAND_H_

#ifndef BITPARITY_CONFIG_MATRIX_FILE_H_
#define BITPARITY_CONFIG_MATRIX_FILE_H_

// A matrix file: a base recipe and axes whose cartesian product are the cells `bitparity matrix`
// runs (harness/matrix_command.h). Reading and expanding it needs no LibTorch, so that the fuzz
// target of the matrix reader (fuzz/fuzz_matrix.cpp) builds apart from the main build.
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

#include <cstddef>
#include <map>
#include <string>
#include <vector>

namespace bitparity {

// The most cells a matrix may have: a product of axes beyond it is refused before it is
// expanded (a few long axes would otherwise take all the memory).
inline constexpr size_t kMaxMatrixCells = 4096;

// One cell: its axis values and the recipe text they give.
struct MatrixCell {
  std::string name;
  std::map<std::string, std::string> values;  // axis -> value
  std::string recipe_text;
};

// A matrix file, expanded into its cells.
struct Matrix {
  std::string name;
  std::string path;
  std::string base_path;
  std::vector<std::string> axes;  // in name order (a TOML table has none); values in file order
  std::map<std::string, std::string> filters;
  std::vector<MatrixCell> cells;  // the full cartesian product, the last axis varying fastest
};

// Reads and expands the matrix file at `path` (at most kMaxTomlFileBytes); InputError names the
// file and key on bad input.
Matrix LoadMatrix(const std::string& path);

// Expands matrix `text` as if read from `path` (its base recipe is read relative to `path`).
Matrix ParseMatrix(const std::string& text, const std::string& path);

// Whether `cell` passes `filter` (a filter name or an expression); InputError if malformed, empty
// (an unset variable must not select every cell), or with an empty term or value.
bool CellMatches(const Matrix& matrix, const MatrixCell& cell, const std::string& filter);

}  // namespace bitparity

#endif  // BITPARITY_CONFIG_MATRIX_FILE_H_

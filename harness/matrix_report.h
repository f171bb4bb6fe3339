#ifndef BITPARITY_HARNESS_MATRIX_REPORT_H_
#define BITPARITY_HARNESS_MATRIX_REPORT_H_

// The reports of one `bitparity matrix` over its cells' RunReports: the cells x checks table the
// console prints (one column per check name, a check shared across cells by its name) with the
// result line, and report.json's matrix form. junit.xml and report.html are JunitReport and
// HtmlMatrixReport over the same cells.

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "harness/report.h"

namespace bitparity {

struct MatrixCellReport {
  std::string name;                           // the cell's name in the matrix, e.g. "bf16_none"
  std::map<std::string, std::string> values;  // axis -> value
  RunReport run;                              // its `bitparity run` (a skip when it cannot run)
};

struct MatrixReport {
  std::string name;
  std::string path;       // the matrix file
  std::string base_path;  // its base recipe
  std::string filter;     // --filter, or ""
  std::vector<std::string> axes;
  std::vector<MatrixCellReport> cells;
  double seconds = 0;
  std::string out_dir;
  std::vector<std::string> developer_switches;  // NAME=value of each set, as every cell saw it
};

// The worst exit code of the cells.
int MatrixExitCode(const MatrixReport& report);

// Every check name of every cell, in order of first appearance: the table's columns.
std::vector<std::string> MatrixColumns(const MatrixReport& report);

// report.json: the matrix, the filter, the axes, the columns, and per cell its values, exit
// code, time and each check's verdict and summary.
nlohmann::json MatrixJsonReport(const MatrixReport& report);

// The cells x checks table (a verdict's MatrixMark per cell and column, '-' for a check the cell
// did not make) and the result line naming the three report files.
std::string MatrixConsoleTable(const MatrixReport& report);

}  // namespace bitparity

#endif  // BITPARITY_HARNESS_MATRIX_REPORT_H_

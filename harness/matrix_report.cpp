#include "harness/matrix_report.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "core/errors.h"

namespace bitparity {

int MatrixExitCode(const MatrixReport& report) {
  int worst = kExitPass;
  for (const MatrixCellReport& cell : report.cells) worst = std::max(worst, cell.run.exit_code);
  return worst;
}

std::vector<std::string> MatrixColumns(const MatrixReport& report) {
  std::vector<std::string> columns;
  for (const MatrixCellReport& cell : report.cells) {
    for (const CheckResult& c : cell.run.checks) {
      // "overlap vs reference: loss" and the like share a column across cells.
      if (std::find(columns.begin(), columns.end(), c.name) == columns.end()) {
        columns.push_back(c.name);
      }
    }
  }
  return columns;
}

nlohmann::json MatrixJsonReport(const MatrixReport& report) {
  nlohmann::json json;
  json["matrix"] = {{"name", report.name}, {"path", report.path}, {"base", report.base_path}};
  json["filter"] = report.filter;
  json["axes"] = report.axes;
  json["checks"] = MatrixColumns(report);
  json["cells"] = nlohmann::json::array();
  for (const MatrixCellReport& cell : report.cells) {
    nlohmann::json verdicts = nlohmann::json::object();
    for (const CheckResult& c : cell.run.checks) {
      verdicts[c.name] = {{"verdict", ToString(c.verdict)}, {"summary", c.summary}};
    }
    json["cells"].push_back({{"name", cell.name},
                             {"values", cell.values},
                             {"exit_code", cell.run.exit_code},
                             {"seconds", cell.run.seconds},
                             {"checks", verdicts}});
  }
  json["exit_code"] = MatrixExitCode(report);
  json["seconds"] = report.seconds;
  if (!report.developer_switches.empty()) json["developer_switches"] = report.developer_switches;
  NonFiniteAsText(&json);
  return json;
}

std::string MatrixConsoleTable(const MatrixReport& report) {
  const std::vector<std::string> columns = MatrixColumns(report);
  std::ostringstream table;
  table << "\ncells x checks (P pass, F fail, S skipped, E error):\n";
  for (const std::string& s : report.developer_switches) {
    table << "  developer switch active in every cell: " << s << "\n";
  }
  for (size_t c = 0; c < columns.size(); ++c) {
    table << "  [" << c + 1 << "] " << columns[c] << "\n";
  }
  for (const MatrixCellReport& cell : report.cells) {
    std::string row(columns.size(), '-');
    for (const CheckResult& c : cell.run.checks) {
      const auto column = std::find(columns.begin(), columns.end(), c.name) - columns.begin();
      row[static_cast<size_t>(column)] = MatrixMark(c.verdict);
    }
    char line[128];
    std::snprintf(line, sizeof(line), "  %-40s ", cell.name.c_str());
    table << line;
    for (char mark : row) table << ' ' << mark;
    table << "\n";
  }
  const int worst = MatrixExitCode(report);
  table << "result: " << ResultWord(worst) << " (exit " << worst << ") in "
        << static_cast<int>(report.seconds) << " s; reports: " << report.out_dir << "/junit.xml, "
        << report.out_dir << "/report.json, " << report.out_dir << "/report.html\n";
  return table.str();
}

}  // namespace bitparity

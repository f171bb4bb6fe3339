#include "harness/matrix_command.h"

#include <toml++/toml.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <numeric>
#include <ostream>
#include <regex>
#include <sstream>
#include <thread>

#include "core/atomic_file.h"
#include "core/clock.h"
#include "core/errors.h"
#include "core/names.h"
#include "core/pipeline_layout.h"
#include "core/recipe.h"
#include "core/recipe_edit.h"
#include "core/toml_reader.h"
#include "harness/html_report.h"
#include "harness/output_folder.h"
#include "harness/report.h"
#include "harness/run_command.h"

namespace bitparity {
namespace {

namespace fs = std::filesystem;

}  // namespace

int RunMatrix(const MatrixOptions& options, std::ostream& console) {
  const auto start = std::chrono::steady_clock::now();
  Matrix matrix = LoadMatrix(options.matrix_path);
  std::vector<const MatrixCell*> selected;
  for (const MatrixCell& cell : matrix.cells) {
    if (CellMatches(matrix, cell, options.filter)) selected.push_back(&cell);
  }
  if (selected.empty()) throw InputError("--filter '" + options.filter + "' selects no cell");
  const OutputFolder output(options.out_dir.empty() ? "out/" + matrix.name : options.out_dir);
  const std::string& out_dir = output.path();

  // Cells whose recipe breaks a rule cannot run: skipped, with the validation message.
  std::vector<RunReport> cells(selected.size());
  std::vector<std::string> paths(selected.size());
  std::vector<size_t> runnable;
  for (size_t i = 0; i < selected.size(); ++i) {
    const MatrixCell& cell = *selected[i];
    cells[i].name = matrix.name + "." + cell.name;
    cells[i].timestamp = UtcTimestamp(/*with_zone=*/false);
    const fs::path dir = fs::path(out_dir) / cell.name;
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec) {
      throw InfrastructureError(
          DescribeWriteError(dir.string(), "cannot create the cell's folder", ec.value()));
    }
    paths[i] = (dir / "recipe.toml").string();
    WriteFileAtomically(paths[i], cell.recipe_text);
    try {
      ParseRecipe(cell.recipe_text, paths[i]);
      runnable.push_back(i);
    } catch (const InputError& e) {
      CheckResult skipped;
      skipped.kind = CheckKind::kCell;
      skipped.name = "cell";
      skipped.verdict = Verdict::kSkipped;
      skipped.summary = std::string("cannot run: ") + e.what();
      cells[i].checks.push_back(skipped);
    }
  }

  console << "matrix " << matrix.name << ": " << selected.size() << " of " << matrix.cells.size()
          << " cells selected, " << runnable.size() << " runnable, " << options.jobs
          << " at a time\n";
  std::mutex mutex;
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t n = next++; n < runnable.size(); n = next++) {
      const size_t i = runnable[n];
      RunOptions run;
      run.recipe_path = paths[i];
      run.out_dir = (fs::path(out_dir) / selected[i]->name).string();
      run.repeats = options.repeats;
      run.no_golden = true;
      run.no_golden_reason = "matrix cells are compared across arms, not with goldens";
      run.quiet = true;
      run.probes = options.probes;
      run.require_golden = options.require_golden;
      run.command_line = options.command_line;
      std::ostringstream cell_console;
      RunReport outcome;
      outcome.timestamp = UtcTimestamp(/*with_zone=*/false);
      try {
        outcome = RunRecipe(run, cell_console);
      } catch (const std::exception& e) {
        // A cell that passed validation can still meet bad input (an unreadable trace, say).
        const bool bad_input = dynamic_cast<const InputError*>(&e) != nullptr;
        outcome.exit_code = bad_input ? kExitBadInput : kExitInfrastructure;
        CheckResult error;
        error.kind = CheckKind::kCell;
        error.name = "cell";
        error.verdict = Verdict::kError;
        error.summary = e.what();
        outcome.checks.push_back(error);
      }
      std::lock_guard<std::mutex> lock(mutex);
      outcome.name = cells[i].name;
      cells[i] = outcome;
      int failed = 0;
      for (const CheckResult& c : outcome.checks) {
        failed += c.verdict == Verdict::kFail || c.verdict == Verdict::kError;
      }
      char line[256];
      std::snprintf(line, sizeof(line), "  %-40s %s (%zu checks, %d failed, %.1f s)\n",
                    selected[i]->name.c_str(), failed ? "FAIL" : "pass", outcome.checks.size(),
                    failed, outcome.seconds);
      console << line << std::flush;
      if (failed && !options.quiet) console << cell_console.str();
    }
  };
  std::vector<std::thread> threads;
  for (int64_t j = 0; j < std::max<int64_t>(1, options.jobs); ++j) threads.emplace_back(worker);
  for (std::thread& t : threads) t.join();

  // The cells x checks table.
  std::vector<std::string> columns;
  auto column_of = [&](const std::string& check) {
    // "overlap vs reference: loss" and the like share a column across cells.
    auto it = std::find(columns.begin(), columns.end(), check);
    if (it == columns.end()) {
      columns.push_back(check);
      return columns.size() - 1;
    }
    return static_cast<size_t>(it - columns.begin());
  };
  for (const RunReport& cell : cells) {
    for (const CheckResult& c : cell.checks) column_of(c.name);
  }
  nlohmann::json report;
  report["matrix"] = {{"name", matrix.name}, {"path", matrix.path}, {"base", matrix.base_path}};
  report["filter"] = options.filter;
  report["axes"] = matrix.axes;
  report["checks"] = columns;
  report["cells"] = nlohmann::json::array();
  int worst = kExitPass;
  std::ostringstream table;
  table << "\ncells x checks (P pass, F fail, S skipped, E error):\n";
  for (size_t c = 0; c < columns.size(); ++c) table << "  [" << c + 1 << "] " << columns[c] << "\n";
  for (size_t i = 0; i < selected.size(); ++i) {
    nlohmann::json cell = {{"name", selected[i]->name},
                           {"values", selected[i]->values},
                           {"exit_code", cells[i].exit_code},
                           {"seconds", cells[i].seconds}};
    std::string row(columns.size(), '-');
    nlohmann::json verdicts = nlohmann::json::object();
    for (const CheckResult& c : cells[i].checks) {
      const char mark = c.verdict == Verdict::kPass      ? 'P'
                        : c.verdict == Verdict::kFail    ? 'F'
                        : c.verdict == Verdict::kSkipped ? 'S'
                                                         : 'E';
      row[column_of(c.name)] = mark;
      verdicts[c.name] = {{"verdict", ToString(c.verdict)}, {"summary", c.summary}};
    }
    cell["checks"] = verdicts;
    report["cells"].push_back(cell);
    char line[128];
    std::snprintf(line, sizeof(line), "  %-40s ", selected[i]->name.c_str());
    table << line;
    for (char mark : row) table << ' ' << mark;
    table << "\n";
    worst = std::max(worst, cells[i].exit_code);
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  report["exit_code"] = worst;
  report["seconds"] = seconds;
  WriteFileAtomically((fs::path(out_dir) / "junit.xml").string(), JunitReport(cells));
  WriteFileAtomically((fs::path(out_dir) / "report.json").string(), report.dump(2) + "\n");
  WriteFileAtomically((fs::path(out_dir) / "report.html").string(),
                      HtmlMatrixReport(matrix.name, cells));
  table << "result: " << ResultWord(worst) << " (exit " << worst << ") in "
        << static_cast<int>(seconds) << " s; reports: " << out_dir << "/junit.xml, " << out_dir
        << "/report.json, " << out_dir << "/report.html\n";
  console << table.str() << std::flush;
  return worst;
}

}  // namespace bitparity

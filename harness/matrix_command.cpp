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

#include "comm/rank_protocol.h"
#include "config/names.h"
#include "config/recipe.h"
#include "config/recipe_edit.h"
#include "config/toml_reader.h"
#include "core/atomic_file.h"
#include "core/clock.h"
#include "core/errors.h"
#include "harness/html_report.h"
#include "harness/matrix_report.h"
#include "harness/output_folder.h"
#include "harness/report.h"
#include "harness/run_command.h"
#include "schedule/pipeline_layout.h"

namespace bitparity {
namespace {

namespace fs = std::filesystem;

}  // namespace

namespace {

// One `bitparity matrix`: the selected cells, their recipes in their folders, their runs and
// the reports over all of them.
class MatrixRun {
 public:
  MatrixRun(const MatrixOptions& options, std::ostream& console)
      : options_(options),
        console_(console),
        start_(std::chrono::steady_clock::now()),
        matrix_(LoadMatrix(options.matrix_path)) {
    for (const MatrixCell& cell : matrix_.cells) {
      if (!options.filter_given || CellMatches(matrix_, cell, options.filter)) {
        selected_.push_back(&cell);
      }
    }
    if (selected_.empty()) throw InputError("--filter '" + options.filter + "' selects no cell");
  }

  int Run() {
    const OutputFolder output(options_.out_dir.empty() ? "out/" + matrix_.name : options_.out_dir);
    out_dir_ = output.path();
    PrepareCells();
    console_ << "matrix " << matrix_.name << ": " << selected_.size() << " of "
             << matrix_.cells.size() << " cells selected, " << runnable_.size() << " runnable, "
             << options_.jobs << " at a time\n";
    std::atomic<size_t> next{0};
    auto worker = [&] {
      for (size_t n = next++; n < runnable_.size(); n = next++) RunCell(runnable_[n]);
    };
    std::vector<std::thread> threads;
    for (int64_t j = 0; j < std::max<int64_t>(1, options_.jobs); ++j) threads.emplace_back(worker);
    for (std::thread& t : threads) t.join();
    return WriteReports();
  }

 private:
  // Every selected cell's folder and recipe; a cell whose recipe breaks a rule cannot run:
  // skipped, with the validation message.
  void PrepareCells() {
    cells_.resize(selected_.size());
    paths_.resize(selected_.size());
    for (size_t i = 0; i < selected_.size(); ++i) {
      const MatrixCell& cell = *selected_[i];
      cells_[i].name = matrix_.name + "." + cell.name;
      cells_[i].timestamp = UtcTimestamp(/*with_zone=*/false);
      const fs::path dir = fs::path(out_dir_) / cell.name;
      std::error_code ec;
      fs::create_directories(dir, ec);
      if (ec) {
        throw InfrastructureError(
            DescribeWriteError(dir.string(), "cannot create the cell's folder", ec.value()));
      }
      paths_[i] = (dir / "recipe.toml").string();
      WriteFileAtomically(paths_[i], cell.recipe_text);
      try {
        ParseRecipe(cell.recipe_text, paths_[i]);
        runnable_.push_back(i);
      } catch (const InputError& e) {
        CheckResult skipped;
        skipped.kind = CheckKind::kCell;
        skipped.name = CheckName(CheckKind::kCell, "");
        skipped.verdict = Verdict::kSkipped;
        skipped.summary = std::string("cannot run: ") + e.what();
        cells_[i].checks.push_back(skipped);
      }
    }
  }

  // Cell i as `bitparity run` runs a recipe; one progress line, and its console when it failed.
  void RunCell(size_t i) {
    RunOptions run;
    run.recipe_path = paths_[i];
    run.out_dir = (fs::path(out_dir_) / selected_[i]->name).string();
    run.repeats = options_.repeats;
    run.no_golden = true;
    run.no_golden_reason = "matrix cells are compared across arms, not with goldens";
    run.quiet = true;
    run.probes = options_.probes;
    run.require_golden = options_.require_golden;
    run.command_line = options_.command_line;
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
      error.name = CheckName(CheckKind::kCell, "");
      error.verdict = Verdict::kError;
      error.summary = e.what();
      outcome.checks.push_back(error);
    }
    std::lock_guard<std::mutex> lock(mutex_);
    outcome.name = cells_[i].name;
    cells_[i] = outcome;
    int failed = 0;
    for (const CheckResult& c : outcome.checks) {
      failed += c.verdict == Verdict::kFail || c.verdict == Verdict::kError;
    }
    char line[256];
    std::snprintf(line, sizeof(line), "  %-40s %s (%zu checks, %d failed, %.1f s)\n",
                  selected_[i]->name.c_str(), failed ? "FAIL" : "pass", outcome.checks.size(),
                  failed, outcome.seconds);
    console_ << line << std::flush;
    if (failed && !options_.quiet) console_ << cell_console.str();
  }

  // The cells x checks table on the console, junit.xml, report.json and report.html; the worst
  // exit code of the cells.
  int WriteReports() {
    MatrixReport report;
    report.name = matrix_.name;
    report.path = matrix_.path;
    report.base_path = matrix_.base_path;
    report.filter = options_.filter;
    report.axes = matrix_.axes;
    for (size_t i = 0; i < selected_.size(); ++i) {
      report.cells.push_back({selected_[i]->name, selected_[i]->values, cells_[i]});
    }
    report.seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    report.out_dir = out_dir_;
    report.developer_switches = ActiveDeveloperSwitches();
    WriteFileAtomically((fs::path(out_dir_) / "junit.xml").string(), JunitReport(cells_));
    WriteFileAtomically((fs::path(out_dir_) / "report.json").string(),
                        MatrixJsonReport(report).dump(2) + "\n");
    WriteFileAtomically((fs::path(out_dir_) / "report.html").string(),
                        HtmlMatrixReport(matrix_.name, cells_));
    console_ << MatrixConsoleTable(report) << std::flush;
    return MatrixExitCode(report);
  }

  const MatrixOptions& options_;
  std::ostream& console_;
  const std::chrono::steady_clock::time_point start_;
  const Matrix matrix_;
  std::vector<const MatrixCell*> selected_;
  std::string out_dir_;
  std::vector<RunReport> cells_;
  std::vector<std::string> paths_;
  std::vector<size_t> runnable_;
  std::mutex mutex_;
};

}  // namespace

int RunMatrix(const MatrixOptions& options, std::ostream& console) {
  return MatrixRun(options, console).Run();
}

}  // namespace bitparity

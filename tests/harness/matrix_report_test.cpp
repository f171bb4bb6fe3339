// The matrix reporters, pinned: the cells x checks table with its result line, and report.json's
// matrix form, over two cells' RunReports (one that ran, with a passing and a failing check; one
// that could not run).

#include "harness/matrix_report.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "harness/html_report.h"
#include "harness/report.h"
#include "tests/support/junit_reader.h"
#include "tests/support/test_support.h"

namespace bitparity {
namespace {

CheckResult Check(CheckKind kind, const std::string& arm, const std::string& other, Verdict verdict,
                  const std::string& summary) {
  CheckResult check = NewCheck(kind, arm, other);
  check.verdict = verdict;
  check.summary = summary;
  return check;
}

MatrixReport TwoCells() {
  MatrixReport report;
  report.name = "m";
  report.path = "recipes/m.toml";
  report.base_path = "recipes/base.toml";
  report.filter = "precision=bf16";
  report.axes = {"precision", "recompute"};
  report.seconds = 12.7;
  report.out_dir = "out/m";
  MatrixCellReport ran{"bf16_none", {{"precision", "bf16"}, {"recompute", "none"}}, {}};
  ran.run.exit_code = 1;
  ran.run.seconds = 10.5;
  ran.run.checks = {
      Check(CheckKind::kReproduces, "overlap", "", Verdict::kPass, "bit-identical"),
      Check(CheckKind::kLoss, "overlap", "reference", Verdict::kFail, "loss differs")};
  MatrixCellReport skipped{"bf16_block1", {{"precision", "bf16"}, {"recompute", "block1"}}, {}};
  skipped.run.checks = {Check(CheckKind::kCell, "", "", Verdict::kSkipped, "cannot run: x")};
  report.cells = {ran, skipped};
  return report;
}

TEST(MatrixReport, ConsoleTableIsPinned) {
  EXPECT_EQ(MatrixConsoleTable(TwoCells()),
            "\ncells x checks (P pass, F fail, S skipped, E error):\n"
            "  [1] overlap reproduces itself\n"
            "  [2] overlap vs reference: loss\n"
            "  [3] cell\n"
            "  bf16_none                                 P F -\n"
            "  bf16_block1                               - - S\n"
            "result: FAIL (exit 1) in 12 s; reports: out/m/junit.xml, out/m/report.json, "
            "out/m/report.html\n");
}

TEST(MatrixReport, JsonReportIsPinned) {
  const nlohmann::json expected = nlohmann::json::parse(R"({
    "matrix": {"name": "m", "path": "recipes/m.toml", "base": "recipes/base.toml"},
    "filter": "precision=bf16",
    "axes": ["precision", "recompute"],
    "checks": ["overlap reproduces itself", "overlap vs reference: loss", "cell"],
    "cells": [
      {"name": "bf16_none", "values": {"precision": "bf16", "recompute": "none"},
       "exit_code": 1, "seconds": 10.5,
       "checks": {"overlap reproduces itself": {"verdict": "pass", "summary": "bit-identical"},
                  "overlap vs reference: loss": {"verdict": "fail", "summary": "loss differs"}}},
      {"name": "bf16_block1", "values": {"precision": "bf16", "recompute": "block1"},
       "exit_code": 0, "seconds": 0.0,
       "checks": {"cell": {"verdict": "skipped", "summary": "cannot run: x"}}}],
    "exit_code": 1,
    "seconds": 12.7
  })");
  EXPECT_EQ(MatrixJsonReport(TwoCells()), expected) << MatrixJsonReport(TwoCells()).dump(2);
}

// A developer switch set for the matrix is said at its top: the table, report.json, and each
// cell's junit testsuite (harness/report.h's JunitReport) and report.html.
TEST(MatrixReport, ActiveDeveloperSwitchesAreSaidAtTheTop) {
  MatrixReport report = TwoCells();
  report.developer_switches = {"BITPARITY_INJECT_BUG=composite_rms_norm"};
  EXPECT_NE(
      MatrixConsoleTable(report).find(
          "\n  developer switch active in every cell: BITPARITY_INJECT_BUG=composite_rms_norm\n"),
      std::string::npos)
      << MatrixConsoleTable(report);
  EXPECT_EQ(MatrixJsonReport(report)["developer_switches"],
            nlohmann::json::parse(R"(["BITPARITY_INJECT_BUG=composite_rms_norm"])"));
  for (MatrixCellReport& cell : report.cells) {
    cell.run.recipe_path = "recipes/base.toml";
    cell.run.timestamp = "2026-12-07T12:00:00";
    cell.run.developer_switches = report.developer_switches;
  }
  std::vector<RunReport> cells = {report.cells[0].run, report.cells[1].run};
  const std::string junit = JunitReport(cells);
  EXPECT_NE(junit.find("<property name=\"developer_switch\" "
                       "value=\"BITPARITY_INJECT_BUG=composite_rms_norm\" />"),
            std::string::npos)
      << junit;
  testing::TempDir dir;
  testing::ExpectValidJunit(dir.Write("junit.xml", junit));
  EXPECT_NE(HtmlMatrixReport("m", cells)
                .find("developer switch active: BITPARITY_INJECT_BUG=composite_rms_norm"),
            std::string::npos);
}

TEST(MatrixReport, ExitCodeIsTheWorstCells) {
  MatrixReport report = TwoCells();
  EXPECT_EQ(MatrixExitCode(report), 1);
  report.cells[1].run.exit_code = 3;
  EXPECT_EQ(MatrixExitCode(report), 3);
}

}  // namespace
}  // namespace bitparity

#ifndef BITPARITY_HARNESS_CHECK_RESULT_H_
#define BITPARITY_HARNESS_CHECK_RESULT_H_

// What a check found, as every reporter reads it: its kind, its one name, its verdict (and the
// verdict's words, from one table), the summary and details for people, the figures for the
// JSON report, the first difference, the first divergent operations and the attribution.

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "harness/attribution_result.h"
#include "harness/trace_compare.h"

namespace bitparity {

enum class Verdict { kPass, kFail, kSkipped, kError };
// The words of a verdict, from one table: report.json's ("pass", "fail", "skipped", "error"),
// the console's ("PASS", "FAIL", "SKIP", "ERROR"), the HTML report's class ("pass", "fail",
// "skip", "error") and the matrix table's mark ('P', 'F', 'S', 'E').
const char* ToString(Verdict verdict);
const char* ConsoleWord(Verdict verdict);
const char* HtmlClass(Verdict verdict);
char MatrixMark(Verdict verdict);
// The verdict an exit code stands for: 0 pass, 1 fail, anything else error.
Verdict VerdictOfExitCode(int exit_code);

// What a check is about; the harness finds a check by its kind and arm, never by its name.
enum class CheckKind {
  kReproduces,    // an arm's runs agree bit for bit
  kLoss,          // arm vs baseline: loss records
  kGradients,     // arm vs baseline: gradient records
  kParameters,    // arm vs baseline: parameter records
  kMemoryModel,   // an arm's measured peak vs its memory model
  kMemory,        // an arm's peak vs another arm's, under a bound
  kOverlap,       // the share of an arm's all-to-all time hidden under compute, under a bound
  kReplay,        // an arm's recompute replays against their first pass (node probes)
  kCensus,        // the activations live at each segment replay against the memory model
  kGolden,        // the baseline vs its golden
  kGoldenMemory,  // the baseline's peak memory vs its golden's
  kResumes,       // runs resumed from run 1's checkpoints vs run 1 (restart replay)
  kRun,           // one run of an arm could not finish (an infrastructure fault)
  kCell,          // a matrix cell that could not run
};
const char* ToString(CheckKind kind);

// The one place a check's name is spelled, for people and for the JUnit testcase:
//   kReproduces "<arm> reproduces itself"        kMemoryModel "<arm>: peak memory vs model"
//   kLoss etc.  "<arm> vs <other>: loss"         kMemory      "<arm> vs <other>: peak memory"
//   kReplay     "<arm>: replays equal first pass" kOverlap    "<arm>: all-to-all hidden"
//   kCensus     "<arm>: recompute census"         kGolden      "golden: <arm>"
//   kRun        "<arm> run <other>"               kGoldenMemory "golden memory: <arm>"
//   kCell       "cell"                            kResumes     "<arm> resumes bit-identically"
//                                                   (from another arm's checkpoint: + " from
//                                                   <other>")
// `other` is the baseline (cross-arm checks), the bounding arm (kMemory), the run's number (kRun)
// or the arm whose checkpoints are resumed (kResumes, when not `arm`); the other kinds ignore it.
std::string CheckName(CheckKind kind, const std::string& arm, const std::string& other = "");

struct CheckResult {
  CheckKind kind = CheckKind::kRun;
  std::string arm;   // the arm checked (for kMemory: the bounded arm)
  std::string name;  // for people, e.g. "overlap vs reference: gradients"
  Verdict verdict = Verdict::kPass;
  std::string summary;                                // one line
  std::string details;                                // what differs, localization
  nlohmann::json figures = nlohmann::json::object();  // every figure, for the JSON report
  double seconds = 0;  // the wall time of the runs it compared (JUnit's testcase time)
  std::optional<Difference> difference;  // the first difference, for localization
  // Record comparisons (kReproduces, kLoss, kGradients, kParameters, kGolden, when bitwise).
  int64_t compared_records = 0;
  int64_t differing_records = 0;
  int64_t differing_run = 0;  // kReproduces that failed: the first run (1-based) unlike run 1
  // Where the compared runs' node probes first differ, one sentence per rank (empty: every probe
  // agrees); absent when no probes were compared.
  std::optional<std::vector<std::string>> first_divergent_operations;
  std::string first_divergent_operations_from;  // non-empty: probes of other runs than these
  std::optional<Attribution> attribution;       // a failed kReproduces, with attribution on

  // `figures` with the typed fields added ("first_divergent_operations",
  // "first_divergent_operations_from", "attribution"): the check's figures in report.json.
  nlohmann::json AllFigures() const;
};

// An unfinished check of `kind` on `arm`, named by CheckName.
CheckResult NewCheck(CheckKind kind, const std::string& arm, const std::string& other = "");

}  // namespace bitparity

#endif  // BITPARITY_HARNESS_CHECK_RESULT_H_

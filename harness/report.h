#ifndef BITPARITY_HARNESS_REPORT_H_
#define BITPARITY_HARNESS_REPORT_H_

// The reports of `bitparity run` and `bitparity matrix`, as reporters over one plain result:
// `RunReport` holds everything a run of a recipe found (its arms' runs and its checks); JSON,
// console and JUnit reporters turn one (or, for JUnit and the matrix, a list of them) into text.
// The reporters are pure functions: tests/harness/report_output_test.cpp pins their output.
// Files are written atomically.

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "harness/checks.h"
#include "harness/fingerprint.h"
#include "harness/throughput.h"
#include "trace/trace.h"

namespace bitparity {

// One rank's peak memory in one run.
struct RankMemoryReport {
  int64_t rank = 0;
  int64_t peak_bytes = 0;
  int64_t predicted_peak_bytes = -1;  // the memory model's, -1 when the trace has none
};

// One run of one arm, as the reports show it.
struct ArmRunReport {
  int64_t index = 1;  // 1-based repeat
  std::string trace_path;
  double seconds = 0;                // the launcher's wall time
  std::vector<float> loss;           // per iteration (rank 0's; the same on every rank)
  std::vector<double> step_seconds;  // per iteration, rank 0's
  std::vector<int64_t> peak_bytes;   // per iteration, the largest over the ranks
  int64_t peak_bytes_max = 0;        // over iterations and ranks
  std::vector<RankMemoryReport> memory;
  AllToAllTime all_to_all;                 // over ranks and iterations but the first
  Throughput throughput;                   // counted GEMM FLOPs over step time; MFU
  AllToAllBreakdown all_to_all_breakdown;  // the last iteration's, by node and phase
  std::string records_digest;              // RecordsDigest of the run's trace
  // For report.html (not in report.json): per iteration, rank 0's grad norm; rank 0's memory
  // timeline of the last iteration (with --memory-timeline); each rank's schedule intervals of
  // the last iteration (arms with a schedule of nodes).
  std::vector<double> grad_norm;
  std::vector<MemorySample> memory_timeline;
  std::vector<std::vector<ScheduleInterval>> schedule_timeline;
};

// The report of one run from its trace.
ArmRunReport SummarizeRun(const Trace& trace, const std::string& trace_path, double seconds,
                          int64_t index);

// Which parameters differ at which iterations between two runs (a grad or parameter digest,
// per rank), for report.html's heat map; rows hold only parameters that differ somewhere.
struct DifferenceMap {
  std::string title;  // e.g. "overlap run 1 vs reference run 1"
  std::vector<int64_t> iterations;
  std::vector<std::string> rows;            // "rank 0: layers.1.mlp.w1"
  std::vector<std::vector<uint8_t>> cells;  // [row][iteration]: 1 differs, 0 equal
  int64_t differing_parameters = 0;         // rows before any limit
};
inline constexpr size_t kDifferenceMapRows = 48;

// The map of `a` against `b`; empty rows when they agree everywhere.
DifferenceMap MapDifferences(const std::string& title, const Trace& a, const Trace& b);

struct ArmReport {
  std::string name;
  std::string engine;
  std::vector<ArmRunReport> runs;
};

// Everything `bitparity run` found for one recipe, or one matrix cell.
struct RunReport {
  std::string name;  // the recipe's name, or <matrix>.<cell>
  std::string recipe_name;
  std::string recipe_path;  // empty for a matrix cell that could not run
  Fingerprint fingerprint;
  std::string baseline;
  std::string golden_path;
  bool golden_present = false;
  int64_t repeats = 0;
  std::vector<ArmReport> arms;  // in the order they ran: the baseline first
  std::vector<CheckResult> checks;
  double seconds = 0;
  std::string timestamp;  // when it started, ISO 8601 UTC without a zone (JUnit's form)
  std::string out_dir;    // where junit.xml and report.json go
  int exit_code = 0;
  // Developer switches set in the launcher's environment ("NAME=value"), which its ranks
  // inherit; reported when there are any.
  std::vector<std::string> developer_switches;
  std::vector<DifferenceMap> difference_maps;  // failed comparisons of two runs (report.html)
};

// The exit code of a list of checks: 3 when one is an error, else 1 when one failed, else 0.
int ExitCodeOf(const std::vector<CheckResult>& checks);

// report.json of `bitparity run`. NaN and infinities, which JSON cannot hold as numbers (they
// would become null), are written as the strings "NaN", "Infinity" and "-Infinity".
nlohmann::json JsonReport(const RunReport& report);
// Replaces every non-finite number in `value` by its text, as JsonReport writes it.
void NonFiniteAsText(nlohmann::json* value);

// The summary `bitparity run` prints: the arms, the checks, the failures' details, the result.
std::string ConsoleReport(const RunReport& report);

// junit.xml: one testsuite per report, one testcase per check; failures carry the
// localization, infrastructure faults are errors.
std::string JunitReport(const std::vector<RunReport>& reports);

// The checks as a table: verdict, name, summary.
std::string FormatChecks(const std::vector<CheckResult>& checks);

// "PASS", "FAIL" or "ERROR" for an exit code.
const char* ResultWord(int exit_code);

}  // namespace bitparity

#endif  // BITPARITY_HARNESS_REPORT_H_

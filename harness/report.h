#ifndef BITPARITY_HARNESS_REPORT_H_
#define BITPARITY_HARNESS_REPORT_H_

// Reports of `bitparity run` and `bitparity matrix`: JUnit XML (one testsuite per recipe or
// matrix cell, one testcase per check; failures carry the localization, infrastructure faults
// are errors), a JSON document with every figure, and a console summary table. Files are
// written atomically.

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "harness/checks.h"

namespace bitparity {

struct SuiteReport {
  std::string name;  // the recipe or matrix cell
  std::vector<CheckResult> checks;
  std::vector<std::pair<std::string, std::string>> properties;  // e.g. fingerprint, git revision
  double seconds = 0;
  std::string timestamp;  // ISO 8601, UTC
};

void WriteJunit(const std::string& path, const std::vector<SuiteReport>& suites);
void WriteJson(const std::string& path, const nlohmann::json& document);

// The checks as a table: verdict, name, summary.
std::string FormatChecks(const std::vector<CheckResult>& checks);

// Writes `text` to `path` through a temporary file and a rename.
void WriteFileAtomically(const std::string& path, const std::string& text);

std::string UtcTimestamp();

}  // namespace bitparity

#endif  // BITPARITY_HARNESS_REPORT_H_

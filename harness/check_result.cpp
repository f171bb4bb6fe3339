#include "harness/check_result.h"

#include <stdexcept>

#include "core/enum_names.h"
#include "core/errors.h"

namespace bitparity {

namespace {

struct VerdictWords {
  Verdict verdict;
  const char* json;
  const char* console;
  const char* html_class;
  char mark;
};
constexpr VerdictWords kVerdictWords[] = {{Verdict::kPass, "pass", "PASS", "pass", 'P'},
                                          {Verdict::kFail, "fail", "FAIL", "fail", 'F'},
                                          {Verdict::kSkipped, "skipped", "SKIP", "skip", 'S'},
                                          {Verdict::kError, "error", "ERROR", "error", 'E'}};

const VerdictWords& WordsOf(Verdict verdict) {
  for (const VerdictWords& words : kVerdictWords) {
    if (words.verdict == verdict) return words;
  }
  throw std::logic_error("a verdict without words");
}
constexpr EnumName<CheckKind> kCheckKindNames[] = {{CheckKind::kReproduces, "reproduces"},
                                                   {CheckKind::kLoss, "loss"},
                                                   {CheckKind::kGradients, "gradients"},
                                                   {CheckKind::kParameters, "parameters"},
                                                   {CheckKind::kMemoryModel, "memory_model"},
                                                   {CheckKind::kMemory, "memory"},
                                                   {CheckKind::kOverlap, "overlap"},
                                                   {CheckKind::kReplay, "replay"},
                                                   {CheckKind::kCensus, "census"},
                                                   {CheckKind::kGolden, "golden"},
                                                   {CheckKind::kGoldenMemory, "golden_memory"},
                                                   {CheckKind::kResumes, "resumes"},
                                                   {CheckKind::kRun, "run"},
                                                   {CheckKind::kCell, "cell"}};

}  // namespace

const char* ToString(Verdict verdict) { return WordsOf(verdict).json; }
const char* ConsoleWord(Verdict verdict) { return WordsOf(verdict).console; }
const char* HtmlClass(Verdict verdict) { return WordsOf(verdict).html_class; }
char MatrixMark(Verdict verdict) { return WordsOf(verdict).mark; }

Verdict VerdictOfExitCode(int exit_code) {
  return exit_code == kExitPass          ? Verdict::kPass
         : exit_code == kExitCheckFailed ? Verdict::kFail
                                         : Verdict::kError;
}
const char* ToString(CheckKind kind) { return NameIn(kCheckKindNames, kind); }

std::string CheckName(CheckKind kind, const std::string& arm, const std::string& other) {
  switch (kind) {
    case CheckKind::kReproduces:
      return arm + " reproduces itself";
    case CheckKind::kLoss:
      return arm + " vs " + other + ": loss";
    case CheckKind::kGradients:
      return arm + " vs " + other + ": gradients";
    case CheckKind::kParameters:
      return arm + " vs " + other + ": parameters";
    case CheckKind::kMemoryModel:
      return arm + ": peak memory vs model";
    case CheckKind::kMemory:
      return arm + " vs " + other + ": peak memory";
    case CheckKind::kOverlap:
      return arm + ": all-to-all hidden";
    case CheckKind::kReplay:
      return arm + ": replays equal first pass";
    case CheckKind::kCensus:
      return arm + ": recompute census";
    case CheckKind::kGolden:
      return "golden: " + arm;
    case CheckKind::kGoldenMemory:
      return "golden memory: " + arm;
    case CheckKind::kResumes:
      return arm + " resumes bit-identically" +
             (other.empty() || other == arm ? std::string() : " from " + other);
    case CheckKind::kRun:
      return arm + " run " + other;
    case CheckKind::kCell:
      return "cell";
  }
  return "";
}

nlohmann::json CheckResult::AllFigures() const {
  nlohmann::json all = figures;
  if (first_divergent_operations) all["first_divergent_operations"] = *first_divergent_operations;
  if (!first_divergent_operations_from.empty()) {
    all["first_divergent_operations_from"] = first_divergent_operations_from;
  }
  if (attribution) all["attribution"] = attribution->ToJson();
  return all;
}

CheckResult NewCheck(CheckKind kind, const std::string& arm, const std::string& other) {
  CheckResult result;
  result.kind = kind;
  result.arm = arm;
  result.name = CheckName(kind, arm, other);
  return result;
}

}  // namespace bitparity

#include "harness/golden_check.h"

#include <cmath>
#include <cstdio>

#include "harness/probe_compare.h"
#include "harness/trace_explain.h"

namespace bitparity {
namespace {

CheckResult NewGoldenCheck(CheckKind kind, const std::string& arm) {
  CheckResult result;
  result.kind = kind;
  result.arm = arm;
  result.name = CheckName(kind, arm);
  return result;
}

std::string Mib(int64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.3f MiB", static_cast<double>(bytes) / (1 << 20));
  return text;
}

// Against the nearest golden of another fingerprint: what differs, as details and figures.
void ExplainAgainstNearest(const GoldenCheckInput& input, CheckResult* result) {
  const Trace& nearest = *input.lookup->nearest;
  TraceExplanation e = ExplainTraces(nearest, *input.run);
  std::string source = "node probes of both";
  if (!e.records.identical && !e.probes_compared && HasProbes(nearest) && input.rerun_with_probes &&
      e.records.first->iteration >= 1) {
    if (std::optional<Trace> rerun = input.rerun_with_probes(e.records.first->iteration)) {
      e.operations = FirstProbeDivergences(nearest, *rerun);
      e.probes_compared = true;
      source = "a rerun of the run with node probes up to iteration " +
               std::to_string(e.records.first->iteration);
    }
  }
  result->details += "compared, without gating, with the nearest golden " +
                     input.lookup->nearest_path + " (its fingerprint " +
                     TraceFingerprint(nearest).key + "):\n" + e.Describe("the golden", "this run");
  if (!e.records.identical && e.records.first->record != "structure") {
    const Difference& d = *e.records.first;
    result->summary += "; the nearest golden (" + TraceFingerprint(nearest).key +
                       ") first differs at iteration " + std::to_string(d.iteration) + ", rank " +
                       std::to_string(d.rank) + ": " + d.record +
                       (d.param.empty() ? "" : " of " + d.param);
  } else if (e.records.identical) {
    result->summary +=
        "; the nearest golden (" + TraceFingerprint(nearest).key + ") is bit-identical to this run";
  }
  nlohmann::json& f = result->figures;
  f["nearest_golden"] = input.lookup->nearest_path;
  f["fingerprint_differences"] = e.fingerprint_differences;
  f["identical_to_nearest"] = e.records.identical;
  if (!e.records.identical) {
    f["first_difference"] = e.records.first->Describe();
    f["differing_records"] = e.records.differing_records;
    f["compared_records"] = e.records.compared_records;
  }
  if (e.probes_compared && !e.records.identical) {
    std::vector<std::string> sentences;
    for (const ProbeDivergence& d : e.operations) sentences.push_back(d.Describe());
    result->first_divergent_operations = std::move(sentences);
    result->first_divergent_operations_from = source;
  }
}

CheckResult CheckWithoutGolden(const GoldenCheckInput& input) {
  CheckResult result = NewGoldenCheck(CheckKind::kGolden, input.arm);
  const GoldenLookup& lookup = *input.lookup;
  const std::string record = "record one with `bitparity run " + input.recipe_path +
                             " --update-golden` on a machine of this fingerprint";
  const bool fails = input.require && lookup.others_exist;
  result.verdict = fails ? Verdict::kFail : Verdict::kSkipped;
  result.summary = (fails ? "goldens are required (--require-golden): " : "") +
                   lookup.missing_reason + "; " + record;
  result.figures["fingerprint"] = input.fingerprint.key;
  if (lookup.nearest) ExplainAgainstNearest(input, &result);
  return result;
}

}  // namespace

CheckResult CheckGoldenMemory(const std::string& arm, const Trace& run, const Trace& golden,
                              double tolerance) {
  CheckResult result = NewGoldenCheck(CheckKind::kGoldenMemory, arm);
  double worst = 0;
  std::string worst_where;
  int64_t compared = 0;
  const size_t ranks = std::min(run.ranks.size(), golden.ranks.size());
  for (size_t r = 0; r < ranks; ++r) {
    const std::vector<IterationRecord>& a = run.ranks[r].iterations;
    const std::vector<IterationRecord>& g = golden.ranks[r].iterations;
    for (size_t i = 0; i < std::min(a.size(), g.size()); ++i) {
      if (a[i].peak_bytes < 0 || g[i].peak_bytes < 0) {
        // An external rank that could not count its tensors (docs/external-arms.md).
        result.verdict = Verdict::kSkipped;
        result.summary = std::string(a[i].peak_bytes < 0 ? "the run" : "the golden") +
                         " recorded no peak memory (rank " + std::to_string(r) +
                         " could not count its tensor bytes)";
        return result;
      }
      ++compared;
      const double distance =
          g[i].peak_bytes == 0 ? (a[i].peak_bytes == 0 ? 0.0 : INFINITY)
                               : std::fabs(static_cast<double>(a[i].peak_bytes - g[i].peak_bytes)) /
                                     static_cast<double>(g[i].peak_bytes);
      const std::string where = "iteration " + std::to_string(a[i].iteration) + ", rank " +
                                std::to_string(r) + ": " + Mib(a[i].peak_bytes) +
                                " against the golden's " + Mib(g[i].peak_bytes);
      if (distance > tolerance && result.verdict == Verdict::kPass) {
        result.verdict = Verdict::kFail;
        char line[64];
        std::snprintf(line, sizeof(line), " (%+.1f%%, bound %.1f%%)",
                      100.0 * (a[i].peak_bytes - g[i].peak_bytes) / g[i].peak_bytes,
                      100.0 * tolerance);
        result.summary = "peak memory differs from the golden's at " + where + line;
      }
      if (distance > worst || worst_where.empty()) {
        worst = distance;
        worst_where = where;
      }
    }
  }
  if (run.ranks.size() != golden.ranks.size()) {
    result.verdict = Verdict::kFail;
    result.summary = "the run has " + std::to_string(run.ranks.size()) + " ranks, the golden " +
                     std::to_string(golden.ranks.size());
  } else if (result.verdict == Verdict::kPass) {
    char line[96];
    std::snprintf(line, sizeof(line), "%lld peaks within %.1f%% of the golden's; the farthest, ",
                  static_cast<long long>(compared), 100.0 * tolerance);
    result.summary = line + worst_where;
  }
  result.figures["compared_peaks"] = compared;
  result.figures["largest_relative_distance"] = std::isfinite(worst) ? worst : -1.0;
  result.figures["tolerance"] = tolerance;
  return result;
}

std::vector<CheckResult> CheckGoldens(const GoldenCheckInput& input) {
  const Trace* golden = input.lookup && input.lookup->golden ? &*input.lookup->golden : nullptr;
  CheckResult memory = NewGoldenCheck(CheckKind::kGoldenMemory, input.arm);
  if (!input.skip_reason.empty() || !golden) {
    CheckResult bits = input.skip_reason.empty() && input.lookup
                           ? CheckWithoutGolden(input)
                           : CheckGolden(input.arm, *input.run, nullptr, input.skip_reason);
    memory.verdict = Verdict::kSkipped;
    memory.summary = input.skip_reason.empty()
                         ? "no golden for this machine's fingerprint " + input.fingerprint.key
                         : input.skip_reason;
    return {bits, memory};
  }
  CheckResult bits = CheckGolden(input.arm, *input.run, golden, "");
  if (bits.verdict == Verdict::kFail && bits.compared_records == 0) {
    // Recorded from other settings: its memory means nothing either.
    memory.verdict = Verdict::kSkipped;
    memory.summary = "the golden was recorded from a recipe with other settings";
    return {bits, memory};
  }
  return {bits, CheckGoldenMemory(input.arm, *input.run, *golden, input.memory_tolerance)};
}

void UpdateGolden(const GoldenUpdate& update, const GoldenStore& store,
                  std::vector<CheckResult>& checks) {
  CheckResult* golden = nullptr;
  int failed = 0;
  for (CheckResult& c : checks) {
    if (c.kind == CheckKind::kGolden && c.arm == update.arm) {
      golden = &c;
    } else if (c.kind != CheckKind::kGoldenMemory &&
               (c.verdict == Verdict::kFail || c.verdict == Verdict::kError)) {
      ++failed;
    }
  }
  if (!golden) return;
  if (failed > 0) {
    golden->verdict = Verdict::kFail;
    golden->summary = "not updated: " + std::to_string(failed) +
                      " other check(s) failed, and a golden must come from a passing run";
    return;
  }
  std::string replaced;
  if (golden->verdict == Verdict::kFail) {
    replaced = "; the golden it replaced differed: " + golden->summary;
    golden->details = "the replaced golden differed:\n" + golden->details;
    golden->figures["replaced_a_differing_golden"] = true;
  } else {
    replaced = golden->verdict == Verdict::kSkipped ? "; before: " + golden->summary
                                                    : "; the golden it replaced matched";
    golden->details.clear();
    golden->figures["replaced_a_differing_golden"] = false;
  }
  store.Replace(update.path, *update.run, update.fingerprint, update.command_line);
  golden->verdict = Verdict::kPass;
  golden->summary = "updated: wrote " + update.path + replaced;
  golden->difference.reset();
}

}  // namespace bitparity

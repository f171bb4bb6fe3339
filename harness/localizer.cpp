#include "harness/localizer.h"

#include <sstream>

#include "harness/probe_compare.h"
#include "harness/trace_compare.h"

namespace bitparity {

void LocalizeFailures(std::vector<CheckResult>& checks,
                      const std::vector<std::vector<ComparedRun>>& compared, const Trace* golden,
                      const RerunWithDumps& rerun) {
  for (size_t i = 0; i < checks.size(); ++i) {
    CheckResult& check = checks[i];
    if (check.verdict != Verdict::kFail || !check.difference || compared[i].size() != 2) continue;
    Difference& d = *check.difference;
    const bool needs_dumps = d.record == "grad_digest" && !d.tensor;
    // Two runs compared without node probes: their reruns record them, and name the operation;
    // so does a run compared with a golden that holds probes.
    const bool golden_side = compared[i][0].arm.empty() || compared[i][1].arm.empty();
    const bool needs_probes = !check.first_divergent_operations &&
                              (!golden_side || (golden != nullptr && HasProbes(*golden)));
    if (!needs_dumps && !needs_probes) continue;
    const std::string label = "check" + std::to_string(i + 1);
    auto side = [&](const ComparedRun& run, const char* suffix) -> std::optional<Trace> {
      if (run.arm.empty()) return golden ? std::optional<Trace>(*golden) : std::nullopt;
      return rerun(run, d.iteration, label + suffix);
    };
    std::optional<Trace> a = side(compared[i][0], "_a");
    std::optional<Trace> b = side(compared[i][1], "_b");
    if (needs_probes && a && b && HasProbes(*a) && HasProbes(*b)) {
      // A run and its golden are one arm: compared in execution order, as two runs are.
      AddFirstDivergentOperations(*a, *b, !golden_side && compared[i][0].arm != compared[i][1].arm,
                                  &check);
      check.first_divergent_operations_from = "reruns with node probes";
    }
    if (!needs_dumps) continue;
    std::string note;
    const TensorDump* da = a ? FindDump(*a, d.rank, d.iteration, d.param) : nullptr;
    const TensorDump* db = b ? FindDump(*b, d.rank, d.iteration, d.param) : nullptr;
    if (!a || !b) {
      note = "not localized further (rerun budget spent or a rerun failed)";
    } else if (!da || !db) {
      note = "not localized further (no dump of " + d.param + " at iteration " +
             std::to_string(d.iteration) + " on both sides)";
    } else {
      TensorComparison c = CompareTensors(*da, *db);
      if (c.differing == 0) {
        note = "the rerun with dumps did not reproduce the difference (nondeterminism?)";
      } else {
        d.tensor = c;
        note = "localized by rerun: " + c.Describe();
        check.figures["first_element"] = c.first_index;
        check.figures["differing_elements"] = c.differing;
        check.figures["max_abs_diff"] = c.max_abs_diff;
        check.figures["max_ulps"] = c.max_ulps;
      }
    }
    check.summary = "first difference at " + d.Describe();
    std::ostringstream details;
    if (check.compared_records > 0) {
      details << check.differing_records << " of " << check.compared_records << " records differ\n";
    }
    details << note << "\n" << FirstDivergenceLines(check.first_divergent_operations);
    check.details = details.str();
  }
}

}  // namespace bitparity

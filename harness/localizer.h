#ifndef BITPARITY_HARNESS_LOCALIZER_H_
#define BITPARITY_HARNESS_LOCALIZER_H_

// The localizer: a failed check whose first difference is a main grad's digest names the
// parameter but not the element. It reruns both runs the check compared up to that iteration
// with full gradient dumps there, compares the two dumps and names the first differing element,
// its values, the ulp distance and how many elements differ. The reruns record node probes: a
// check of two runs made without them gets each rank's first divergent operation from the reruns
// (escalation), whatever its first difference; so does a run that differs from a golden
// recorded with probes (the golden is not rerun).

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "harness/checks.h"
#include "trace/trace.h"

namespace bitparity {

// One side of a comparison: run `run` (1-based) of `arm`; an empty arm is the golden.
struct ComparedRun {
  std::string arm;
  int64_t run = 0;
};

// Reruns `run` up to `iteration` with dumps there, its files under a folder named `label`;
// nullopt when it cannot (the rerun budget is spent, or the rerun failed).
using RerunWithDumps = std::function<std::optional<Trace>(const ComparedRun& run, int64_t iteration,
                                                          const std::string& label)>;

// Localizes every failed check of `checks` whose first difference is an undumped main-grad
// digest and that compared two runs (`compared[i]` are check i's sides); the golden side is
// `golden` itself (it holds no dumps unless the recipe asked for them). Rewrites the check's
// summary and details with what it found, or with why it could not.
void LocalizeFailures(std::vector<CheckResult>& checks,
                      const std::vector<std::vector<ComparedRun>>& compared, const Trace* golden,
                      const RerunWithDumps& rerun);

}  // namespace bitparity

#endif  // BITPARITY_HARNESS_LOCALIZER_H_

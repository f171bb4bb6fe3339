#ifndef BITPARITY_HARNESS_ATTRIBUTION_H_
#define BITPARITY_HARNESS_ATTRIBUTION_H_

// Explaining a run that does not reproduce itself. When an arm's runs differ, `bitparity run`
// reruns the failing window (iteration 1 to the first difference, at least 3) in pairs: once as
// it ran (the control), then with one factor changed at a time, each pair with node probes. A
// factor whose pair is bit-identical while the control's is not is what the difference follows;
// the sentence says what that means. Factors this machine's runs cannot vary are listed with
// the reason (every run is already its own rank processes; every collective already adds in rank
// order). The check's verdict never changes: a run is never made green by rerunning it.

#include <cstdint>
#include <functional>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "harness/attribution_result.h"
#include "harness/checks.h"

namespace bitparity {

// Reruns the arm's iterations 1..`window` twice with node probes, under `label`, with `threads`
// intra-op threads (0: the recipe's) and deterministic algorithms forced or not; the
// reproducibility check over the two, or nullopt when a rerun did not finish.
using PairRerun = std::function<std::optional<CheckResult>(
    const std::string& label, int64_t window, int64_t threads, bool deterministic_algorithms)>;

// Attributes `check`, an arm's failed reproducibility check, for a recipe of `recipe_threads`
// intra-op threads and `recipe_iterations` iterations: the control pair, then one pair per
// factor that can vary, through `rerun`; the attribution goes to the check's `attribution` and
// details. `progress` (may be null) gets one line when the reruns start.
void AttributeFailure(int64_t recipe_threads, int64_t recipe_iterations, const PairRerun& rerun,
                      std::ostream* progress, CheckResult* check);

}  // namespace bitparity

#endif  // BITPARITY_HARNESS_ATTRIBUTION_H_

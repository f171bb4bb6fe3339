#ifndef BITPARITY_HARNESS_CHECK_PLAN_H_
#define BITPARITY_HARNESS_CHECK_PLAN_H_

// The checks one `bitparity run` makes, as data: built once from the recipe, the selected arms
// and the options, before any training, then walked to run the checks, to error every one of
// them when the runs could not finish (so that an interrupted run lists the same testcases as
// a complete one), and to find the runs a failure is localized on. The order is the reports':
//   each arm reproduces itself; its replays equal their first pass (with node probes); its
//   recompute census (the overlap engine under full recompute); it resumes bit-identically
//   ([train] checkpoint_at; from the baseline's checkpoints too with resume_across_arms); every
//   other arm against the
//   baseline (loss, gradients, parameters); peak memory against the model ([compare]
//   memory_model); the memory bounds; the overlap bounds; the golden and the golden memory.
// A check that cannot run with these arms or repeats is planned skipped, with the reason.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "config/recipe.h"
#include "harness/checks.h"
#include "harness/localizer.h"

namespace bitparity {

struct PlannedCheck {
  CheckKind kind = CheckKind::kReproduces;
  std::string arm;    // the arm checked (for kMemory and kOverlap: the bounded arm)
  std::string other;  // the baseline (kLoss, kGradients, kParameters), the bounding arm (kMemory)
  std::string name;   // CheckName(kind, arm, other)
  // The two runs it compares, the golden being {"", 0}; empty for a check over all of an arm's
  // runs. The localizer reruns these.
  std::vector<ComparedRun> compares;
  size_t bound = 0;         // kMemory, kOverlap: the index in [compare] memory / overlap
  std::string skip_reason;  // non-empty: skipped, for this reason
};

struct CheckPlanOptions {
  int64_t repeats = 2;
  bool probes = false;  // the ranks record node probes
};

std::vector<PlannedCheck> PlanChecks(const Recipe& recipe, const std::vector<std::string>& arms,
                                     const CheckPlanOptions& options);

// Whether an arm replays recompute segments (the overlap engine under full recompute): its
// ranks record the recompute census.
bool TakesCensus(const ArmConfig& arm);

}  // namespace bitparity

#endif  // BITPARITY_HARNESS_CHECK_PLAN_H_

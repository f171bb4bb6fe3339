#ifndef BITPARITY_HARNESS_GOLDEN_CHECK_H_
#define BITPARITY_HARNESS_GOLDEN_CHECK_H_

// The golden checks of `bitparity run`, over the baseline's first run:
//   "golden: <arm>"         every record bit for bit against the golden of this machine's
//                           fingerprint (CheckGolden). Without one it is skipped, saying how to
//                           record one; with goldens required (--require-golden, which ci/gate
//                           passes) and goldens of other fingerprints in the store, it fails
//                           instead: a CI host never passes by skipping. Either way the nearest
//                           golden of another fingerprint is compared and what differs is
//                           explained (trace_explain.h), without gating on it.
//   "golden memory: <arm>"  every rank's and iteration's peak tensor bytes within [compare]
//                           golden_memory of the golden's (a change that only keeps more
//                           activations alive passes the bits but not this).

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "harness/checks.h"
#include "harness/fingerprint.h"
#include "harness/golden_store.h"
#include "trace/trace.h"

namespace bitparity {

struct GoldenCheckInput {
  std::string arm;             // the baseline
  const Trace* run = nullptr;  // its first run
  const GoldenLookup* lookup = nullptr;
  Fingerprint fingerprint;         // this machine's for the recipe
  std::string recipe_path;         // for the command that records a golden
  bool require = false;            // --require-golden
  double memory_tolerance = 0.05;  // [compare] golden_memory
  // Non-empty: the golden checks are skipped for this reason (--no-golden, the ranks ran under
  // another fingerprint).
  std::string skip_reason;
  // The baseline's first run again, up to `iteration`, with node probes; nullopt when it cannot
  // (the rerun budget is spent or the rerun failed). Used to name the first divergent operation
  // against a nearest golden that holds probes when the run has none.
  std::function<std::optional<Trace>(int64_t iteration)> rerun_with_probes;
};

// "golden: <arm>", then "golden memory: <arm>".
std::vector<CheckResult> CheckGoldens(const GoldenCheckInput& input);

// Every rank's and iteration's peak_bytes of `run` within `tolerance` (relative) of `golden`'s;
// the first that is not is named with both figures.
CheckResult CheckGoldenMemory(const std::string& arm, const Trace& run, const Trace& golden,
                              double tolerance);

// What to replace with --update-golden: the golden file, the run that becomes it.
struct GoldenUpdate {
  std::string arm;  // the baseline
  std::string path;
  const Trace* run = nullptr;
  Fingerprint fingerprint;
  std::string command_line;
};

// --update-golden, after every check ran: the baseline's golden check of `checks` becomes the
// update. When any other check failed or errored it fails, "not updated: N other check(s)
// failed" (a golden comes from a passing run); otherwise the run replaces the golden and the
// check passes, saying what it replaced (a mismatch it papers over stays in the report). The
// golden memory check, against the golden being replaced, is left as it is.
void UpdateGolden(const GoldenUpdate& update, const GoldenStore& store,
                  std::vector<CheckResult>& checks);

}  // namespace bitparity

#endif  // BITPARITY_HARNESS_GOLDEN_CHECK_H_

#ifndef BITPARITY_HARNESS_RUN_COMMAND_H_
#define BITPARITY_HARNESS_RUN_COMMAND_H_

// `bitparity run`: the main job a CI pipeline gates on. Runs every arm of a recipe `repeats`
// times as separate process groups, requires each arm to reproduce itself bit for bit, compares
// every arm with the baseline under the recipe's [compare] policy, checks the baseline against
// its golden for this machine's fingerprint, localizes the first divergence (rerunning with
// full gradient dumps when needed), and writes junit.xml and report.json.

#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include "harness/report.h"

namespace bitparity {

struct RunOptions {
  std::string recipe_path;
  std::string out_dir;            // default: out/<recipe name>
  std::vector<std::string> arms;  // default: every arm of the recipe
  int64_t repeats = 2;
  std::string golden_dir;  // default: golden/ next to the recipe's folder
  bool update_golden = false;
  bool no_golden = false;
  // A recipe whose goldens are all of other fingerprints fails its golden check instead of
  // skipping it (CI: ci/gate passes it).
  bool require_golden = false;
  std::string no_golden_reason = "disabled by --no-golden";
  // Developer switch: "ARM:RUN:SPEC" adds a BITPARITY_PERTURB=SPEC to run RUN (1-based, or
  // "all") of ARM.
  std::vector<std::string> perturb;
  int64_t localize_runs = 4;  // most reruns spent on localizing divergences
  // An arm that does not reproduce itself: rerun its failing window with one factor changed at a
  // time and say which restores reproducibility (harness/attribution.h).
  bool attribution = true;
  bool quiet = false;
  // The console is a terminal: each run's progress is one line rewritten in place (in a pipe or
  // a CI log, one line per iteration).
  bool terminal = false;
  bool memory_timeline = false;  // record live bytes at every phase mark in the traces
  bool probes = false;           // node probes in every trace, whatever the recipe says
  std::string command_line;
};

// Runs the job and writes the reports into the output directory; prints progress and the
// summary to `console`. Throws InputError for bad input (nothing is written then).
RunReport RunRecipe(const RunOptions& options, std::ostream& console);

}  // namespace bitparity

#endif  // BITPARITY_HARNESS_RUN_COMMAND_H_

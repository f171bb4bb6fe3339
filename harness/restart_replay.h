#ifndef BITPARITY_HARNESS_RESTART_REPLAY_H_
#define BITPARITY_HARNESS_RESTART_REPLAY_H_

// Restart replay, the third determinism gate: a run stopped at an iteration boundary and resumed
// from its checkpoint in fresh rank processes is the uninterrupted run, bit for bit. With
// [train] checkpoint_at, run 1 of every built-in arm saves a checkpoint after each listed
// iteration (runtime/checkpoint.h); after every arm's runs, one run per checkpoint resumes from
// it and trains to the end; with resume_across_arms, every other arm also resumes from the
// baseline's checkpoints. The check "<arm> resumes bit-identically" then holds each resumed run
// against the arm's run 1.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "config/recipe.h"
#include "harness/check_result.h"
#include "trace/trace.h"

namespace bitparity {

struct PlannedResume {
  std::string arm;     // the arm the resumed run trains
  std::string source;  // the arm whose run 1 saved the checkpoint: `arm`, or the baseline
  int64_t after_iteration = 0;
};

// Whether run 1 of `arm` saves checkpoints: the recipe lists [train] checkpoint_at and the arm is
// built in (an external arm's program saves none).
bool SavesCheckpoints(const Recipe& recipe, const std::string& arm);

// The resumed runs of one `bitparity run` over `arms`, in the order they run: each arm from its
// own checkpoints, then each other arm from the baseline's (resume_across_arms; those
// CrossArmResumeProblem allows).
std::vector<PlannedResume> PlanResumes(const Recipe& recipe, const std::vector<std::string>& arms);

// Why `arm` cannot resume from the baseline's checkpoints, or "" when it can: both are built in
// and train in one precision recipe (arms of different precision do not hold the same state).
std::string CrossArmResumeProblem(const Recipe& recipe, const std::string& arm);

// Where a resumed run writes, under the output folder: "<arm>/resume_<K>", or
// "<arm>/resume_<K>_from_<source>".
std::string ResumeFolder(const PlannedResume& resume);

// "<arm> resumes bit-identically" (from `source`'s checkpoints when it is not `arm`): each of
// `resumed` (the iteration its checkpoint was saved after, and the resumed run's trace) against
// `straight`, the arm's run 1. In order, for each: the resumed ranks are the run's; the masters
// they restored equal run 1's after that iteration; every iteration's optimizer step, LR schedule
// step and data batch equal run 1's; every record after it equals run 1's bit for bit. A failure
// names the iteration, the rank, the record or parameter, and the state it points to.
CheckResult CheckResumes(const std::string& arm, const std::string& source, const Trace& straight,
                         const std::vector<std::pair<int64_t, const Trace*>>& resumed);

// `trace` with only the records of the iterations after `iteration` (and their dumps and probes).
Trace RecordsAfter(const Trace& trace, int64_t iteration);

}  // namespace bitparity

#endif  // BITPARITY_HARNESS_RESTART_REPLAY_H_

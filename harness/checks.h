#ifndef BITPARITY_HARNESS_CHECKS_H_
#define BITPARITY_HARNESS_CHECKS_H_

// The checks `bitparity run` gates on, each a pure function of traces: an arm reproduces
// itself, two arms agree (losses, gradients, parameters) under the recipe's policy, peak memory
// stays within a bound, the baseline matches its golden. A failing check names the first
// differing iteration, rank and tensor.

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "config/recipe.h"
#include "harness/check_result.h"
#include "harness/trace_compare.h"
#include "trace/trace.h"

namespace bitparity {

// A bitwise comparison's outcome into `result`: the compared and differing record counts, a pass
// ("bit-identical: N <what>") or the first difference.
void FromComparison(const TraceComparison& c, CheckResult* result, const std::string& what);

// Every record of every iteration and rank bit-identical between the runs (memory and time are
// not compared).
CheckResult CheckReproduces(const std::string& arm, const std::vector<const Trace*>& runs);

// `arm` against `baseline` for one quantity under a tolerance policy.
CheckResult CheckLosses(const std::string& arm, const Trace& a, const std::string& baseline,
                        const Trace& b, const Tolerance& policy);
CheckResult CheckGradients(const std::string& arm, const Trace& a, const std::string& baseline,
                           const Trace& b, const Tolerance& policy);
CheckResult CheckParameters(const std::string& arm, const Trace& a, const std::string& baseline,
                            const Trace& b, const Tolerance& policy);

// The largest peak_bytes over the iterations and ranks of a trace.
int64_t PeakBytes(const Trace& trace);
// The largest peak_bytes of one rank.
int64_t RankPeakBytes(const RankTrace& rank);
// The memory model's prediction recorded by a rank, or -1.
int64_t PredictedPeakBytes(const RankTrace& rank);
// Every rank's measured peak within `tolerance` (relative) of its predicted peak.
CheckResult CheckMemoryModel(const std::string& arm, const Trace& trace, double tolerance);
CheckResult CheckMemory(const MemoryBound& bound, int64_t peak_arm, int64_t peak_of);
// CheckName of a memory bound's check.
std::string MemoryCheckName(const MemoryBound& bound);

// A run's all-to-all time over every rank and iteration but the first (a warm-up, when there
// are more): in flight is start to completion, exposed is the time the schedule waited for them.
struct AllToAllTime {
  int64_t count = 0;  // all-to-alls
  double in_flight_seconds = 0;
  double exposed_seconds = 0;
  // 1 - exposed / in flight, clamped to [0, 1]; 0 when nothing was in flight.
  double hidden_fraction() const;
};
AllToAllTime AllToAllTimeOf(const Trace& trace);

// With node probes in both traces: each rank's first divergent operation (FirstProbeDivergences
// for two runs of one arm, FirstCrossArmDivergences for an arm and its baseline) as the check's
// first_divergent_operations and lines of the details. CheckReproduces adds them itself.
void AddFirstDivergentOperations(const Trace& a, const Trace& b, bool across_arms,
                                 CheckResult* result);

// One digest (XXH3-64, as "0x%016x") of every record a trace's comparison reads: per rank and
// iteration the losses, grad norm and learning rate bits and every grad and parameter digest.
// Two runs are bit-identical exactly when their record digests are equal (up to collisions); the
// reports list each run's, so that "reproduces itself" is checked over every run, never by
// rerunning until two agree.
std::string RecordsDigest(const Trace& trace);

// "<arm>: replays equal first pass": with node probes, every forward output of every recompute
// replay in every run equals its first pass bit for bit; the first mismatch of each rank is
// named. Skipped when the runs recorded no replay.
CheckResult CheckReplays(const std::string& arm, const std::vector<const Trace*>& runs);

// "<arm>: recompute census": a segment's replayed activations are gone before the next replay
// of its pass. For every two consecutive segment replays of one pass (iteration, chunk,
// microbatch) in every run and rank, the live bytes grow from the earlier replay to the later by
// less than the memory model's growth plus half of the earlier segment's activation bytes; so
// each replay holds one segment's activations, as the model says, not two. (Compared as growth,
// the model's constant offsets cancel.) A segment that outlives its backward adds a whole
// segment. Skipped when no pass replayed two segments.
inline constexpr double kCensusSegmentSlack = 0.5;
CheckResult CheckRecomputeCensus(const std::string& arm, const std::vector<const Trace*>& runs);

// CheckName of an overlap bound's check.
std::string OverlapCheckName(const OverlapBound& bound);
// The bound holds for every run in `runs` (the arm's): the worst run's hidden fraction is at
// least bound.hidden_at_least. An arm that ran no all-to-all fails, saying so.
CheckResult CheckOverlap(const OverlapBound& bound, const std::vector<const Trace*>& runs);

// The baseline's run against its golden (everything, bitwise). `skip_reason` non-empty: skipped.
CheckResult CheckGolden(const std::string& arm, const Trace& run, const Trace* golden,
                        const std::string& skip_reason);

}  // namespace bitparity

#endif  // BITPARITY_HARNESS_CHECKS_H_

#ifndef BITPARITY_HARNESS_PROBE_COMPARE_H_
#define BITPARITY_HARNESS_PROBE_COMPARE_H_

// Reading node probes (ProbeRecord, trace/trace.h; recorded with [trace] probes = "nodes"):
// - the first divergent operation of two runs of one arm: per rank, the first record in the
//   rank's execution order whose digest differs. Every record before it matched, the inputs of
//   its operation among them, so it names the operation that broke the bits;
// - replays against their first pass: every forward output a recompute replay produced must
//   equal, bit for bit, what the first pass of the same operation produced.

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "trace/trace.h"

namespace bitparity {

// "iteration 3, microbatch 2, chunk 0, decoder 1, moe_combine forward, output 0" (an input
// gradient for a backward record).
std::string DescribeProbe(const ProbeRecord& record);

// Where two runs of one rank first differ, in the rank's execution order.
struct ProbeDivergence {
  int64_t rank = 0;
  size_t index = 0;              // of the record in the rank's probes
  ProbeRecord a;                 // run a's record
  std::optional<ProbeRecord> b;  // run b's at that index; none when run b recorded fewer
  // Across arms: `b` is the baseline's record of the same key, and "before it" means before it
  // in arm a's order among the records both arms made.
  bool across_arms = false;
  // "rank 1: first divergent operation: iteration 3, ... (everything the rank computed before
  // it is equal; output differs: digest 0x.. vs 0x..)".
  std::string Describe() const;
};

// The first divergence of each rank whose probes differ (ranks in order); empty when the probes
// are equal or either trace has none.
std::vector<ProbeDivergence> FirstProbeDivergences(const Trace& a, const Trace& b);

// What a failed reproduction says when two runs' node probes are all equal: the difference was
// made outside every probed operation.
inline constexpr char kProbesAllEqual[] =
    "node probes: every operation of every rank recorded equal outputs and input gradients; the "
    "difference arose outside them (gradient reduction, optimizer step, or a developer switch)";

// The lines a check's details give for its first divergent operations (one sentence per rank,
// or kProbesAllEqual for an empty list); "" when no probes were compared.
std::string FirstDivergenceLines(const std::optional<std::vector<std::string>>& sentences);

// Across two arms (`a` against the baseline `b`): records aligned by key (iteration, microbatch,
// chunk, layer, node, slot) and phase, forward with forward and backward with backward (replays
// are checked within an arm). Per rank, the first record in arm a's execution order whose
// counterpart differs; every record before it that both arms made matched, its operation's inputs
// among them. A record one arm made and the other did not is passed over. Empty when nothing
// differs or either trace has no probes.
std::vector<ProbeDivergence> FirstCrossArmDivergences(const Trace& a, const Trace& b);

// Whether every rank of `trace` recorded probes.
bool HasProbes(const Trace& trace);

// A replay output that differs from its first pass.
struct ReplayMismatch {
  int64_t rank = 0;
  ProbeRecord first_pass;
  ProbeRecord replay;
  std::string Describe() const;
};

// Per rank, the first replay record (in execution order) whose digest differs from the forward
// record of the same iteration, microbatch, chunk, layer, node and slot; `replays` counts the
// replay records compared.
std::vector<ReplayMismatch> ReplayMismatches(const Trace& trace, int64_t* replays = nullptr);

}  // namespace bitparity

#endif  // BITPARITY_HARNESS_PROBE_COMPARE_H_

#ifndef BITPARITY_HARNESS_ATTRIBUTION_RESULT_H_
#define BITPARITY_HARNESS_ATTRIBUTION_RESULT_H_

// What the attribution of a run that does not reproduce itself found (harness/attribution.h
// runs it): the control pair, each factor tried, and the sentence that explains the difference.
// A failed reproducibility check carries it (CheckResult::attribution).

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace bitparity {

enum class AttributionFactor {
  kThreads,                  // intra-op threads 1 instead of the recipe's
  kDeterministicAlgorithms,  // deterministic algorithms forced, whatever turns them off
  kFixedOrderCollectives,    // collectives through the fixed-order (rank-order) path
  kFreshProcess,             // every run in processes of its own
};
const char* ToString(AttributionFactor factor);

// One factor: changed in a pair of reruns, or not varied (and why).
struct FactorTrial {
  AttributionFactor factor = AttributionFactor::kThreads;
  std::string change;     // "intra-op threads 2 -> 1", or why it was not varied
  bool varied = false;    // a pair of reruns ran with the change
  bool ran = false;       // both reruns finished (false: budget or a failed rerun)
  bool restored = false;  // the pair was bit-identical
};

struct Attribution {
  std::string arm;
  int64_t window = 0;            // the reruns stopped after this iteration
  bool control_ran = false;      // the unchanged pair finished
  bool control_differs = false;  // ... and did not reproduce itself either
  std::vector<FactorTrial> trials;
  // The control pair's first divergent operation per rank (node probes), when it differs.
  std::vector<std::string> first_divergences;

  // One sentence: which change restores reproducibility and what that means, e.g. "the
  // difference follows the intra-op thread count (intra-op threads 2 -> 1 restores
  // reproducibility): a reduction whose order depends on how the threads run".
  std::string Explain() const;
  nlohmann::json ToJson() const;
};

}  // namespace bitparity

#endif  // BITPARITY_HARNESS_ATTRIBUTION_RESULT_H_

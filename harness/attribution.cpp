#include "harness/attribution.h"

namespace bitparity {

const char* ToString(AttributionFactor factor) {
  switch (factor) {
    case AttributionFactor::kThreads:
      return "intra_op_threads";
    case AttributionFactor::kDeterministicAlgorithms:
      return "deterministic_algorithms";
    case AttributionFactor::kFixedOrderCollectives:
      return "fixed_order_collectives";
    case AttributionFactor::kFreshProcess:
      return "fresh_process";
  }
  return "?";
}

namespace {

const FactorTrial* Restoring(const Attribution& a, AttributionFactor factor) {
  for (const FactorTrial& t : a.trials) {
    if (t.factor == factor && t.varied && t.ran && t.restored) return &t;
  }
  return nullptr;
}

}  // namespace

std::string Attribution::Explain() const {
  if (!control_ran) {
    return "not attributed: the control rerun (nothing changed) did not finish";
  }
  if (!control_differs) {
    return "not attributed: the control rerun (nothing changed, iterations 1-" +
           std::to_string(window) +
           ") reproduced itself; the difference is intermittent or needs a longer run";
  }
  // A kernel's nondeterministic path usually needs threads too: the deterministic-algorithms
  // setting is the more specific cause when both restore.
  if (const FactorTrial* t = Restoring(*this, AttributionFactor::kDeterministicAlgorithms)) {
    return "the difference follows the deterministic-algorithms setting (" + t->change +
           " restores reproducibility): a kernel with a nondeterministic path runs unless "
           "deterministic algorithms are forced";
  }
  if (const FactorTrial* t = Restoring(*this, AttributionFactor::kThreads)) {
    return "the difference follows the intra-op thread count (" + t->change +
           " restores reproducibility): a reduction whose order depends on how the threads run";
  }
  if (const FactorTrial* t = Restoring(*this, AttributionFactor::kFixedOrderCollectives)) {
    return "the difference follows the collectives' order (" + t->change +
           " restores reproducibility): a collective that adds in arrival order";
  }
  if (const FactorTrial* t = Restoring(*this, AttributionFactor::kFreshProcess)) {
    return "the difference follows process state (" + t->change +
           " restores reproducibility): state carried from one run to the next";
  }
  std::string tried;
  for (const FactorTrial& t : trials) {
    if (!t.varied || !t.ran) continue;
    tried += (tried.empty() ? "" : ", ") + t.change;
  }
  return "no single change restores reproducibility (tried: " +
         (tried.empty() ? std::string("none could be varied") : tried) +
         "): look for an unseeded random stream, the clock, or memory addresses in the math";
}

nlohmann::json Attribution::ToJson() const {
  nlohmann::json trials_json = nlohmann::json::array();
  for (const FactorTrial& t : trials) {
    trials_json.push_back({{"factor", ToString(t.factor)},
                           {"change", t.change},
                           {"varied", t.varied},
                           {"ran", t.ran},
                           {"restored", t.restored}});
  }
  return {{"window", window},
          {"control_ran", control_ran},
          {"control_differs", control_differs},
          {"factors", trials_json},
          {"first_divergent_operations", first_divergences},
          {"explanation", Explain()}};
}

}  // namespace bitparity

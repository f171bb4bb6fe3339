#include "harness/attribution.h"

#include <algorithm>

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

void AttributeFailure(int64_t recipe_threads, int64_t recipe_iterations, const PairRerun& rerun,
                      std::ostream* progress, CheckResult* check) {
  Attribution a;
  a.arm = check->arm;
  const int64_t first =
      check->difference && check->difference->iteration > 0 ? check->difference->iteration : 1;
  a.window = std::min(recipe_iterations, std::max<int64_t>(first, 3));
  const int64_t threads = recipe_threads;
  a.trials.push_back({AttributionFactor::kThreads,
                      threads > 1 ? "intra-op threads " + std::to_string(threads) + " -> 1"
                                  : "intra-op threads already 1 (the recipe's)",
                      threads > 1});
  a.trials.push_back(
      {AttributionFactor::kDeterministicAlgorithms, "deterministic algorithms forced", true});
  a.trials.push_back({AttributionFactor::kFixedOrderCollectives,
                      "collectives already add in rank order (bitparity's only path)", false});
  a.trials.push_back({AttributionFactor::kFreshProcess,
                      "every run already starts rank processes of its own", false});
  if (progress != nullptr) {
    *progress << "  attributing: rerunning " << a.arm << " iterations 1-" << a.window
              << " in pairs with node probes: as it ran, then with one factor changed\n"
              << std::flush;
  }
  std::optional<CheckResult> control = rerun("control", a.window, 0, false);
  a.control_ran = control.has_value();
  a.control_differs = control && control->verdict == Verdict::kFail;
  if (a.control_differs && control->first_divergent_operations) {
    a.first_divergences = *control->first_divergent_operations;
  }
  for (FactorTrial& t : a.trials) {
    if (!t.varied || !a.control_differs) continue;
    const bool threads_1 = t.factor == AttributionFactor::kThreads;
    std::optional<CheckResult> pair =
        rerun(ToString(t.factor), a.window, threads_1 ? 1 : 0,
              t.factor == AttributionFactor::kDeterministicAlgorithms);
    t.ran = pair.has_value();
    t.restored = pair && pair->verdict == Verdict::kPass;
  }
  check->attribution = a;
  check->details += "attribution: " + a.Explain() + "\n";
  for (const FactorTrial& t : a.trials) {
    check->details += "  " + t.change + ": " +
                      (!t.varied            ? std::string("not varied")
                       : !a.control_differs ? std::string("not tried")
                       : !t.ran             ? std::string("the reruns did not finish")
                       : t.restored         ? std::string("reproduces")
                                            : std::string("still differs")) +
                      "\n";
  }
  for (const std::string& s : a.first_divergences) {
    check->details += "  control rerun: " + s + "\n";
  }
}

}  // namespace bitparity

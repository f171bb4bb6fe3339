#ifndef BITPARITY_COMM_DEVELOPER_SWITCHES_H_
#define BITPARITY_COMM_DEVELOPER_SWITCHES_H_

// The developer switches' grammar, and whether a switch can apply to a recipe (docs/developer.md).
// Torch-free: `run` and `arm` check every switch against the recipe before any rank starts (bad
// input, exit 2, nothing trained), and each rank parses its own again (runtime/debug_switches.h
// turns them into what the rank does).
//
// What "cannot apply" means: a rank outside the world, an iteration outside the run, an element
// index below 0, zero ulps, and an injected bug whose code path the recipe never takes (an mHC bug
// without mHC, a thread-order fault with one thread, an overlap-arm bug with no overlap arm). Such
// a switch would do nothing and the run would pass as if it had been tested.

#include <cstdint>
#include <string>
#include <vector>

#include "config/recipe.h"

namespace bitparity {

enum class FaultKind { kNone, kCrash, kSegv, kHang, kError, kStartup };

// BITPARITY_FAULT="crash|segv|hang|error|startup,rank=R|all[,iteration=I]".
struct FaultPlan {
  static constexpr int64_t kEveryRank = -1;  // `rank=all`
  FaultKind kind = FaultKind::kNone;
  int64_t rank = 0;
  int64_t iteration = 1;
};

// BITPARITY_PERTURB="rank=R,iteration=I,param=NAME,element=K[,ulps=N]": adds exactly `ulps` units
// in the last place to one element of one parameter's main grad at one iteration on one rank, the
// harness's way to prove a check catches a one-ulp change.
struct GradPerturbation {
  int64_t rank = -1;  // -1: off
  int64_t iteration = 0;
  std::string param;
  int64_t element = 0;
  int64_t ulps = 1;

  bool active() const { return rank >= 0; }
};

// Parse the variable's value (empty means off); InputError naming the variable when malformed.
FaultPlan ParseFaultPlan(const std::string& text);
GradPerturbation ParseGradPerturbation(const std::string& text);
// BITPARITY_INJECT_BUG="NAME[,NAME...]": the names, each one of InjectableBugNames().
std::vector<std::string> ParseInjectedBugNames(const std::string& text);
// Every name BITPARITY_INJECT_BUG takes (runtime/injected_bugs.h maps each to its flag).
std::vector<std::string> InjectableBugNames();

// What the switches are checked against: the recipe, the engines of the arms that will run, and
// whether those runs save checkpoints.
struct SwitchTarget {
  const Recipe* recipe = nullptr;
  std::vector<EngineKind> engines;  // empty: not known (a rank checks its recipe-wide needs only)
  bool saves_checkpoints = false;
};

// InputError, naming `source` (the variable or "--perturb '...'"), when the switch cannot apply.
void CheckFaultApplies(const FaultPlan& fault, const SwitchTarget& target,
                       const std::string& source);
void CheckPerturbationApplies(const GradPerturbation& perturbation, const SwitchTarget& target,
                              const std::string& source);
void CheckInjectedBugsApply(const std::vector<std::string>& names, const SwitchTarget& target);

// Parses BITPARITY_FAULT, BITPARITY_PERTURB and BITPARITY_INJECT_BUG from this process's
// environment and checks each against `target`.
void CheckEnvironmentSwitchesApply(const SwitchTarget& target);

}  // namespace bitparity

#endif  // BITPARITY_COMM_DEVELOPER_SWITCHES_H_

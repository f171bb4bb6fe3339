#include "harness/check_plan.h"

#include <algorithm>
#include <initializer_list>
#include <utility>

#include "harness/restart_replay.h"

namespace bitparity {
namespace {

class Planner {
 public:
  Planner(const Recipe& recipe, const std::vector<std::string>& arms)
      : recipe_(recipe), arms_(arms), baseline_(recipe.compare.baseline) {}

  PlannedCheck& Add(CheckKind kind, const std::string& arm, const std::string& other = "") {
    PlannedCheck check;
    check.kind = kind;
    check.arm = arm;
    check.other = other;
    check.name = CheckName(kind, arm, other);
    plan_.push_back(std::move(check));
    return plan_.back();
  }

  bool Selected(const std::string& arm) const {
    return std::find(arms_.begin(), arms_.end(), arm) != arms_.end();
  }

  // "arm 'x' was not run (--arms)" for the first of `arms` not selected, or "".
  std::string NotRun(std::initializer_list<std::string> arms) const {
    for (const std::string& arm : arms) {
      if (!Selected(arm)) return "arm '" + arm + "' was not run (--arms)";
    }
    return "";
  }

  void PlanArmChecks(const CheckPlanOptions& options) {
    for (const std::string& arm : arms_) {
      PlannedCheck& check = Add(CheckKind::kReproduces, arm);
      if (options.repeats >= 2) {
        check.compares = {{arm, 1}, {arm, options.repeats}};
      } else {
        check.skip_reason = "one run only (--repeats 1)";
      }
    }
    if (options.probes) {
      for (const std::string& arm : arms_) Add(CheckKind::kReplay, arm);
    }
    for (const std::string& arm : arms_) {
      if (TakesCensus(recipe_.arm(arm))) Add(CheckKind::kCensus, arm);
    }
  }

  // Restart replay (harness/restart_replay.h): each arm against its own checkpoints, then each
  // other arm against the baseline's.
  void PlanResumeChecks() {
    if (recipe_.train.checkpoint_at.empty()) return;
    const std::string external = "an external arm's program saves no checkpoints";
    for (const std::string& arm : arms_) {
      Add(CheckKind::kResumes, arm, arm).skip_reason =
          SavesCheckpoints(recipe_, arm) ? "" : external;
    }
    if (!recipe_.train.resume_across_arms) return;
    for (const std::string& arm : arms_) {
      if (arm == baseline_) continue;
      PlannedCheck& check = Add(CheckKind::kResumes, arm, baseline_);
      check.skip_reason = NotRun({baseline_});
      if (check.skip_reason.empty()) check.skip_reason = CrossArmResumeProblem(recipe_, arm);
    }
  }

  void PlanAgainstBaseline() {
    if (!Selected(baseline_)) return;
    for (const std::string& arm : arms_) {
      if (arm == baseline_) continue;
      for (CheckKind kind : {CheckKind::kLoss, CheckKind::kGradients, CheckKind::kParameters}) {
        Add(kind, arm, baseline_).compares = {{arm, 1}, {baseline_, 1}};
      }
    }
  }

  void PlanMemoryAndOverlap() {
    const ComparePolicy& policy = recipe_.compare;
    if (policy.memory_model > 0) {
      for (const std::string& arm : arms_) Add(CheckKind::kMemoryModel, arm);
    }
    for (size_t i = 0; i < policy.memory.size(); ++i) {
      const MemoryBound& bound = policy.memory[i];
      PlannedCheck& check = Add(CheckKind::kMemory, bound.arm, bound.of);
      check.bound = i;
      check.skip_reason = NotRun({bound.arm, bound.of});
    }
    for (size_t i = 0; i < policy.overlap.size(); ++i) {
      PlannedCheck& check = Add(CheckKind::kOverlap, policy.overlap[i].arm);
      check.bound = i;
      check.skip_reason = NotRun({check.arm});
    }
  }

  void PlanGoldens() {
    const std::string not_run =
        Selected(baseline_) ? "" : "the baseline arm '" + baseline_ + "' was not run (--arms)";
    Add(CheckKind::kGolden, baseline_).compares = {{baseline_, 1}, {"", 0}};
    plan_.back().skip_reason = not_run;
    Add(CheckKind::kGoldenMemory, baseline_).skip_reason = not_run;
  }

  std::vector<PlannedCheck> Take() { return std::move(plan_); }

 private:
  const Recipe& recipe_;
  const std::vector<std::string>& arms_;
  const std::string baseline_;
  std::vector<PlannedCheck> plan_;
};

}  // namespace

bool TakesCensus(const ArmConfig& arm) {
  return arm.engine == EngineKind::kOverlap && arm.recompute.full();
}

std::vector<PlannedCheck> PlanChecks(const Recipe& recipe, const std::vector<std::string>& arms,
                                     const CheckPlanOptions& options) {
  Planner planner(recipe, arms);
  planner.PlanArmChecks(options);
  planner.PlanResumeChecks();
  planner.PlanAgainstBaseline();
  planner.PlanMemoryAndOverlap();
  planner.PlanGoldens();
  return planner.Take();
}

}  // namespace bitparity

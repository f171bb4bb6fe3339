#include "comm/developer_switches.h"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <sstream>

#include "comm/rank_protocol.h"
#include "core/errors.h"

namespace bitparity {
namespace {

// "word,key=value,key=value" -> {"" : word, key : value, ...}
std::map<std::string, std::string> ParseFields(const std::string& variable,
                                               const std::string& text) {
  std::map<std::string, std::string> fields;
  std::stringstream in(text);
  std::string part;
  bool first = true;
  while (std::getline(in, part, ',')) {
    size_t eq = part.find('=');
    if (eq == std::string::npos) {
      if (!first) throw InputError(variable + ": expected key=value, got '" + part + "'");
      fields[""] = part;
    } else {
      fields[part.substr(0, eq)] = part.substr(eq + 1);
    }
    first = false;
  }
  return fields;
}

int64_t ParseField(const std::string& variable, const std::map<std::string, std::string>& fields,
                   const std::string& key, int64_t fallback, bool required) {
  auto it = fields.find(key);
  if (it == fields.end()) {
    if (required) throw InputError(variable + ": '" + key + "=' is required");
    return fallback;
  }
  try {
    size_t used = 0;
    long long v = std::stoll(it->second, &used);
    if (used != it->second.size()) throw std::invalid_argument(it->second);
    return v;
  } catch (const std::exception&) {
    throw InputError(variable + ": " + key + " must be an integer, got '" + it->second + "'");
  }
}

// What an injected bug's code path needs of the recipe and its arms.
enum class BugNeeds {
  kNothing,
  kOverlapArm,         // the overlap engine's schedule
  kOverlapArmWithMtp,  // ... with MTP depths
  kOverlapArmWithMhc,  // ... with mHC
  kOverlapArmWithEp,   // ... with expert-parallel all-to-alls (ep > 1)
  kThreads,            // more than one intra-op thread
  kPipeline,           // pipeline transfers (pp > 1)
  kCheckpoints,        // saved checkpoints
};

struct InjectableBug {
  const char* name;
  BugNeeds needs;
};

// Every bug BITPARITY_INJECT_BUG re-creates (runtime/injected_bugs.h), with what it needs.
constexpr InjectableBug kInjectableBugs[] = {
    {"stale_routing_metadata", BugNeeds::kOverlapArm},
    {"skip_snapshot_restore", BugNeeds::kOverlapArm},
    {"snapshot_skips_input_ids", BugNeeds::kOverlapArm},
    {"snapshot_skips_position_ids", BugNeeds::kOverlapArm},
    {"snapshot_skips_padding_mask", BugNeeds::kOverlapArm},
    {"snapshot_skips_mtp_hidden_states", BugNeeds::kOverlapArmWithMtp},
    {"snapshot_skips_mhc_multistream", BugNeeds::kOverlapArmWithMhc},
    {"mtp_post_outside_segment", BugNeeds::kOverlapArmWithMtp},
    {"flush_per_backward_call", BugNeeds::kOverlapArm},
    {"mhc_bridge_from_chunk_state", BugNeeds::kOverlapArmWithMhc},
    {"synchronous_all_to_all", BugNeeds::kOverlapArmWithEp},
    {"segment_not_released", BugNeeds::kOverlapArm},
    {"thread_order_reduction", BugNeeds::kThreads},
    {"nondeterministic_kernel", BugNeeds::kThreads},
    {"pipeline_one_lane", BugNeeds::kPipeline},
    {"checkpoint_drops_optimizer_steps", BugNeeds::kCheckpoints},
    {"checkpoint_drops_lr_position", BugNeeds::kCheckpoints},
    {"checkpoint_resets_data_position", BugNeeds::kCheckpoints},
    {"checkpoint_masters_in_training_dtype", BugNeeds::kCheckpoints},
    {"composite_rms_norm", BugNeeds::kNothing},
    {"aux_loss_in_objective", BugNeeds::kNothing},
};

bool RunsOverlapArm(const SwitchTarget& target) {
  return target.engines.empty() ||  // a rank does not know the other arms: not its to refuse
         std::find(target.engines.begin(), target.engines.end(), EngineKind::kOverlap) !=
             target.engines.end();
}

// Why the recipe never takes the bug's code path ("" when it does).
std::string Missing(BugNeeds needs, const SwitchTarget& target) {
  const Recipe& recipe = *target.recipe;
  const std::string no_overlap =
      RunsOverlapArm(target) ? "" : "no arm of this run is an overlap arm";
  switch (needs) {
    case BugNeeds::kNothing:
      return "";
    case BugNeeds::kOverlapArm:
      return no_overlap;
    case BugNeeds::kOverlapArmWithMtp:
      if (recipe.model.mtp_layers == 0) return "the recipe has no MTP depth ([model] mtp_layers 0)";
      return no_overlap;
    case BugNeeds::kOverlapArmWithMhc:
      if (!recipe.model.mhc()) return "the recipe does not use mHC ([model] mhc_streams 0)";
      return no_overlap;
    case BugNeeds::kOverlapArmWithEp:
      if (recipe.parallel.ep < 2) return "the recipe has no all-to-all ([parallel] ep 1)";
      return no_overlap;
    case BugNeeds::kThreads:
      if (recipe.parallel.threads < 2) return "the ranks run one thread ([parallel] threads 1)";
      return "";
    case BugNeeds::kPipeline:
      if (recipe.parallel.pp < 2) return "the recipe has no pipeline ([parallel] pp 1)";
      return "";
    case BugNeeds::kCheckpoints:
      if (!target.saves_checkpoints) {
        return "no run saves a checkpoint ([train] checkpoint_at is empty, no --checkpoint-at)";
      }
      return "";
  }
  return "";
}

void CheckRank(int64_t rank, const SwitchTarget& target, const std::string& source) {
  const int64_t world = target.recipe->world_size();
  if (rank >= world) {
    throw InputError(source + ": rank " + std::to_string(rank) + " is outside the world of " +
                     std::to_string(world) + " rank(s) (0.." + std::to_string(world - 1) +
                     "): the switch would do nothing");
  }
}

void CheckIteration(int64_t iteration, const SwitchTarget& target, const std::string& source) {
  const int64_t iterations = target.recipe->train.iterations;
  if (iteration < 1 || iteration > iterations) {
    throw InputError(source + ": iteration " + std::to_string(iteration) +
                     " is outside the run's iterations 1.." + std::to_string(iterations) +
                     ": the switch would do nothing");
  }
}

}  // namespace

FaultPlan ParseFaultPlan(const std::string& text) {
  FaultPlan plan;
  if (text.empty()) return plan;
  const std::string var = kFaultVariable;
  auto fields = ParseFields(var, text);
  static const std::map<std::string, FaultKind> kKinds = {{"crash", FaultKind::kCrash},
                                                          {"segv", FaultKind::kSegv},
                                                          {"hang", FaultKind::kHang},
                                                          {"error", FaultKind::kError},
                                                          {"startup", FaultKind::kStartup}};
  auto kind = kKinds.find(fields[""]);
  if (kind == kKinds.end()) {
    throw InputError(var + ": kind must be crash, segv, hang, error or startup, got '" +
                     fields[""] + "'");
  }
  plan.kind = kind->second;
  if (fields.count("rank") && fields["rank"] == "all") {
    plan.rank = FaultPlan::kEveryRank;
  } else {
    plan.rank = ParseField(var, fields, "rank", 0, true);
    if (plan.rank < 0) throw InputError(var + ": rank must be >= 0 or 'all'");
  }
  plan.iteration = ParseField(var, fields, "iteration", 1, false);
  for (const auto& [key, value] : fields) {
    if (key != "" && key != "rank" && key != "iteration") {
      throw InputError(var + ": unknown key '" + key + "'");
    }
  }
  return plan;
}

GradPerturbation ParseGradPerturbation(const std::string& text) {
  GradPerturbation p;
  if (text.empty()) return p;
  const std::string var = kPerturbVariable;
  auto fields = ParseFields(var, text);
  if (fields.count("")) throw InputError(var + ": expected only key=value fields");
  p.rank = ParseField(var, fields, "rank", 0, true);
  p.iteration = ParseField(var, fields, "iteration", 0, true);
  p.element = ParseField(var, fields, "element", 0, true);
  p.ulps = ParseField(var, fields, "ulps", 1, false);
  if (!fields.count("param") || fields["param"].empty())
    throw InputError(var + ": 'param=' is required");
  p.param = fields["param"];
  for (const auto& [key, value] : fields) {
    if (key != "rank" && key != "iteration" && key != "element" && key != "ulps" &&
        key != "param") {
      throw InputError(var + ": unknown key '" + key + "'");
    }
  }
  if (p.rank < 0) throw InputError(var + ": rank must be >= 0");
  if (p.element < 0) throw InputError(var + ": element must be >= 0");
  if (p.ulps == 0) throw InputError(var + ": ulps 0 changes nothing");
  return p;
}

std::vector<std::string> InjectableBugNames() {
  std::vector<std::string> names;
  for (const InjectableBug& bug : kInjectableBugs) names.push_back(bug.name);
  return names;
}

std::vector<std::string> ParseInjectedBugNames(const std::string& text) {
  std::vector<std::string> names;
  std::stringstream in(text);
  std::string name;
  while (std::getline(in, name, ',')) {
    if (name.empty()) continue;
    const auto known = std::find_if(std::begin(kInjectableBugs), std::end(kInjectableBugs),
                                    [&](const InjectableBug& bug) { return name == bug.name; });
    if (known == std::end(kInjectableBugs)) {
      std::string all;
      for (const InjectableBug& bug : kInjectableBugs) {
        all += (all.empty() ? "" : ", ") + std::string(bug.name);
      }
      throw InputError(std::string(kInjectBugVariable) + ": unknown bug '" + name +
                       "' (known: " + all + ")");
    }
    names.push_back(name);
  }
  return names;
}

void CheckFaultApplies(const FaultPlan& fault, const SwitchTarget& target,
                       const std::string& source) {
  if (fault.kind == FaultKind::kNone) return;
  if (fault.rank != FaultPlan::kEveryRank) CheckRank(fault.rank, target, source);
  if (fault.kind != FaultKind::kStartup) CheckIteration(fault.iteration, target, source);
}

void CheckPerturbationApplies(const GradPerturbation& perturbation, const SwitchTarget& target,
                              const std::string& source) {
  if (!perturbation.active()) return;
  CheckRank(perturbation.rank, target, source);
  CheckIteration(perturbation.iteration, target, source);
}

void CheckInjectedBugsApply(const std::vector<std::string>& names, const SwitchTarget& target) {
  for (const std::string& name : names) {
    for (const InjectableBug& bug : kInjectableBugs) {
      if (name != bug.name) continue;
      const std::string missing = Missing(bug.needs, target);
      if (!missing.empty()) {
        throw InputError(std::string(kInjectBugVariable) + ": " + name +
                         " cannot apply: " + missing + "; the switch would do nothing");
      }
    }
  }
}

void CheckEnvironmentSwitchesApply(const SwitchTarget& target) {
  auto read = [](const char* name) {
    const char* value = std::getenv(name);
    return std::string(value ? value : "");
  };
  CheckFaultApplies(ParseFaultPlan(read(kFaultVariable)), target, kFaultVariable);
  CheckPerturbationApplies(ParseGradPerturbation(read(kPerturbVariable)), target, kPerturbVariable);
  CheckInjectedBugsApply(ParseInjectedBugNames(read(kInjectBugVariable)), target);
}

}  // namespace bitparity

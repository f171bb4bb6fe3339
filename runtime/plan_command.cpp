#include "runtime/plan_command.h"

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "core/errors.h"
#include "core/recipe.h"
#include "core/recompute_plan.h"
#include "overlap_impl/combined_step_plan.h"

namespace bitparity {
namespace {

// The reference arm's order: each microbatch's whole forward, then its whole backward.
std::string ReferenceSchedule(const Recipe& recipe, const ArmConfig& arm, bool json) {
  const ModelConfig& m = recipe.model;
  RecomputePlan plan = BuildRecomputePlan(arm.recompute, m.layers, m.mtp_layers);
  const int64_t microbatches = recipe.microbatches_per_rank();
  nlohmann::json j;
  j["engine"] = "reference";
  j["microbatches"] = microbatches;
  j["segments"] = nlohmann::json::array();
  for (const LayerSegment& s : plan.segments) {
    j["segments"].push_back({{"first_layer", s.first_layer}, {"last_layer", s.last_layer()}});
  }
  j["warnings"] = plan.warnings;
  j["order"] = nlohmann::json::array();
  std::string text =
      "engine reference: microbatches run F0 B0 F1 B1 ...; each forward is one "
      "graph, each backward one call\nrecompute segments (checkpointed, replayed "
      "during backward):";
  text += " " + FormatSegments(plan, m.layers) + "\n";
  for (const std::string& w : plan.warnings) text += "warning: " + w + "\n";
  for (int64_t mb = 0; mb < microbatches; ++mb) {
    j["order"].push_back("F" + std::to_string(mb));
    j["order"].push_back("B" + std::to_string(mb));
    text +=
        (mb ? " " : "order: ") + std::string("F") + std::to_string(mb) + " B" + std::to_string(mb);
  }
  text += "\n";
  return json ? j.dump(2) + "\n" : text;
}

}  // namespace

int PrintPlan(const std::string& recipe_path, const std::string& arm_name, bool json) {
  Recipe recipe = LoadRecipe(recipe_path);
  const ArmConfig& arm = recipe.arm(arm_name);
  if (arm.engine == EngineKind::kReference) {
    std::fputs(ReferenceSchedule(recipe, arm, json).c_str(), stdout);
    return kExitPass;
  }
  CombinedStepPlan plan =
      BuildCombinedStepPlan(recipe.model, recipe.microbatches_per_rank(), arm.recompute);
  if (json) {
    std::printf("%s\n", PlanToJson(plan).c_str());
  } else {
    std::printf("engine overlap, arm %s (%s)\n%s", arm.name.c_str(), recipe.path.c_str(),
                FormatPlan(plan).c_str());
  }
  return kExitPass;
}

}  // namespace bitparity

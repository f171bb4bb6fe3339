#include "runtime/plan_command.h"

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "config/recipe.h"
#include "config/recompute_plan.h"
#include "core/errors.h"
#include "overlap_impl/combined_step_plan.h"
#include "schedule/pipeline_schedule.h"

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

// The reference arm with a pipeline: per pipeline rank its stages (with each chunk's recompute
// segments) and its 1F1B steps, the point-to-point transfers of each pass included.
std::string PipelineReferenceSchedule(const Recipe& recipe, const ArmConfig& arm, bool json) {
  const PipelineLayout pipeline = recipe.pipeline();
  const PipelineScheduleConfig config =
      PipelineScheduleConfig::Of(pipeline, recipe.microbatches_per_rank());
  nlohmann::json j;
  j["engine"] = "reference";
  j["pp"] = config.pp;
  j["vpp"] = config.vpp;
  j["microbatches"] = config.microbatches;
  j["layout"] = pipeline.Text();
  j["ranks"] = nlohmann::json::array();
  std::string text = "engine reference, pipeline \"" + pipeline.Text() + "\" over pp " +
                     std::to_string(config.pp) + " x vpp " + std::to_string(config.vpp) + ", " +
                     std::to_string(config.microbatches) +
                     " microbatches per pipeline rank; interleaved 1F1B, a step's forward then "
                     "its backward\n";
  const std::vector<std::string> stages_text = pipeline.Describe();
  const int64_t last = static_cast<int64_t>(pipeline.stages.size()) - 1;
  for (int64_t r = 0; r < config.pp; ++r) {
    nlohmann::json rank;
    rank["pp_rank"] = r;
    rank["stages"] = nlohmann::json::array();
    text += "pipeline " + stages_text[static_cast<size_t>(r)] + "\n";
    for (int64_t c = 0; c < config.vpp; ++c) {
      const PipelineStage& s = pipeline.stage(r, c);
      const RecomputePlan plan = BuildRecomputePlan(arm.recompute, s.layers, s.mtp_layers);
      const std::string formatted = FormatChunkSegments(plan, s, recipe.model.layers);
      const std::string segments = formatted == "none" ? "" : formatted;
      rank["stages"].push_back({{"chunk", c}, {"stage", s.index}, {"recompute", segments}});
      text += "  chunk " + std::to_string(c) + " (stage " + std::to_string(s.index) +
              "): recompute " + (segments.empty() ? "none" : segments) + "\n";
    }
    rank["order"] = nlohmann::json::array();
    text += "  order:\n";
    for (const PipelineStep& step : PipelineSchedule(config, r)) {
      std::vector<std::string> ops;
      if (step.forward.valid()) {
        const PipelineStage& s = pipeline.stage(r, step.forward.chunk);
        const std::string mb = std::to_string(step.forward.microbatch);
        if (s.index > 0) {
          ops.push_back("recv activation mb" + mb + " from stage " + std::to_string(s.index - 1) +
                        " (rank " + std::to_string(pipeline.stages[s.index - 1].pp_rank) + ")");
        }
        ops.push_back("forward chunk " + std::to_string(step.forward.chunk) + " mb" + mb);
        if (s.index < last) {
          ops.push_back("send activation mb" + mb + " to stage " + std::to_string(s.index + 1) +
                        " (rank " + std::to_string(pipeline.stages[s.index + 1].pp_rank) + ")");
        }
      }
      if (step.backward.valid()) {
        const PipelineStage& s = pipeline.stage(r, step.backward.chunk);
        const std::string mb = std::to_string(step.backward.microbatch);
        if (s.index < last) {
          ops.push_back("recv gradient mb" + mb + " from stage " + std::to_string(s.index + 1) +
                        " (rank " + std::to_string(pipeline.stages[s.index + 1].pp_rank) + ")");
        }
        ops.push_back("backward chunk " + std::to_string(step.backward.chunk) + " mb" + mb);
        if (s.index > 0) {
          ops.push_back("send gradient mb" + mb + " to stage " + std::to_string(s.index - 1) +
                        " (rank " + std::to_string(pipeline.stages[s.index - 1].pp_rank) + ")");
        }
      }
      for (const std::string& op : ops) {
        rank["order"].push_back(op);
        text += "    " + op + "\n";
      }
    }
    j["ranks"].push_back(rank);
  }
  return json ? j.dump(2) + "\n" : text;
}

}  // namespace

int PrintPlan(const std::string& recipe_path, const std::string& arm_name, bool json) {
  Recipe recipe = LoadRecipe(recipe_path);
  const ArmConfig& arm = recipe.arm(arm_name);
  if (arm.engine == EngineKind::kExternal) {
    throw InputError(recipe.path + ": arm '" + arm_name +
                     "' is external: bitparity does not know its schedule");
  }
  if (arm.engine == EngineKind::kReference) {
    const std::string schedule = recipe.parallel.pp > 1
                                     ? PipelineReferenceSchedule(recipe, arm, json)
                                     : ReferenceSchedule(recipe, arm, json);
    std::fputs(schedule.c_str(), stdout);
    return kExitPass;
  }
  const ModelConfig model = recipe.model_of(arm);
  const PipelineLayout pipeline = recipe.pipeline();
  if (recipe.parallel.pp == 1) {
    const CombinedStepPlan plan =
        PlanForArm(model, pipeline, 0, recipe.microbatches_per_rank(), arm);
    if (json) {
      std::printf("%s\n", PlanToJson(plan).c_str());
    } else {
      std::printf("engine overlap, arm %s (%s)\n%s", arm.name.c_str(), recipe.path.c_str(),
                  FormatPlan(plan).c_str());
    }
    return kExitPass;
  }
  // With a pipeline: every pipeline rank's plan (the EP ranks of a stage share it).
  nlohmann::json ranks = nlohmann::json::array();
  if (!json) {
    std::printf(
        "engine overlap, arm %s (%s): pipeline \"%s\" over pp %lld x vpp %lld; "
        "interleaved combined 1F1B\n",
        arm.name.c_str(), recipe.path.c_str(), pipeline.Text().c_str(),
        static_cast<long long>(pipeline.pp), static_cast<long long>(pipeline.vpp));
  }
  for (int64_t r = 0; r < pipeline.pp; ++r) {
    const CombinedStepPlan plan =
        PlanForArm(model, pipeline, r, recipe.microbatches_per_rank(), arm);
    if (json) {
      ranks.push_back(nlohmann::json::parse(PlanToJson(plan)));
    } else {
      std::printf("\n%s", FormatPlan(plan).c_str());
    }
  }
  if (json) {
    nlohmann::json j;
    j["engine"] = "overlap";
    j["pp"] = pipeline.pp;
    j["vpp"] = pipeline.vpp;
    j["layout"] = pipeline.Text();
    j["ranks"] = ranks;
    std::printf("%s\n", j.dump(2).c_str());
  }
  return kExitPass;
}

}  // namespace bitparity

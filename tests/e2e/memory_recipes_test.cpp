// The shipped memory recipes pass their gates through `bitparity run`: the memory model
// predicts every arm's peak within 10%, segment recompute stays far below whole-chunk
// recompute when activations dominate, and lands on the reference's figure when the model's
// state dominates (the seed's regime), without a pipeline and with one (PP2 EP2 VPP2; the
// activation-dominated pipeline recipe is nightly-sized, so a smaller one of the same shape
// checks the model's walk of every pipeline arm here).

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "tests/support/recipe_builder.h"
#include "tests/support/test_support.h"

namespace bitparity {
namespace {

void ExpectPasses(const std::string& recipe_path, const std::vector<std::string>& checks) {
  testing::TempDir dir;
  testing::CommandResult r = testing::RunBitparity(
      {"run", recipe_path, "--out", dir.File("out"), "--repeats", "1", "--quiet"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  nlohmann::json report = nlohmann::json::parse(testing::ReadFile(dir.File("out/report.json")));
  for (const std::string& name : checks) {
    bool found = false;
    for (const auto& check : report["checks"]) {
      if (check["name"] != name) continue;
      found = true;
      EXPECT_EQ(check["verdict"], "pass") << name << ": " << check["summary"];
    }
    EXPECT_TRUE(found) << name;
  }
  std::printf("%s", r.output.c_str());
}

TEST(MemoryRecipes, ActivationsDominate) {
  ExpectPasses(
      testing::SourceDir() + "/recipes/memory.toml",
      {"reference: peak memory vs model", "overlap-segment: peak memory vs model",
       "overlap-chunk: peak memory vs model", "overlap-none: peak memory vs model",
       "overlap-delay-wgrad: peak memory vs model", "overlap-segment vs overlap-chunk: peak memory",
       "overlap-segment vs reference: peak memory"});
}

TEST(MemoryRecipes, ModelStateDominatesAsInTheSeed) {
  ExpectPasses(testing::SourceDir() + "/recipes/memory_seed.toml",
               {"reference: peak memory vs model", "overlap-segment: peak memory vs model",
                "overlap-segment vs reference: peak memory"});
}

TEST(MemoryRecipes, ModelStateDominatesWithAPipeline) {
  ExpectPasses(testing::SourceDir() + "/recipes/memory_pp_seed.toml",
               {"reference: peak memory vs model", "overlap-segment: peak memory vs model",
                "overlap-segment vs reference: peak memory"});
}

// recipes/memory_pp.toml's arms on a model a quarter its depth, one iteration: the walk of each
// pipeline schedule (N from the warm-up depth, k = 1 and 2, whole-chunk and no recompute) within
// 10% on every rank.
TEST(MemoryRecipes, ModelFollowsEveryPipelineArm) {
  testing::TempDir dir;
  const std::string recipe =
      dir.Write("memory_pp_small.toml",
                testing::RecipeBuilder(8, 0)
                    .ModelShape(64, 64, 128, 64, 256)
                    .Set("model.heads", 8)
                    .Set("parallel.pp", 2)
                    .Set("parallel.vpp", 2)
                    .Set("parallel.timeout_s", 300.0)
                    .Batches(16, 1)
                    .Set("compare.memory_model", 0.10)
                    .Arm("reference", "reference", testing::FullRecompute("uniform", 1))
                    .Arm("overlap-segment", "overlap", testing::FullRecompute("uniform", 1))
                    .Arm("overlap-chunk", "overlap",
                         "recompute = { granularity = \"full\", unit = \"chunk\" }")
                    .Arm("overlap-none", "overlap", "recompute = { granularity = \"none\" }")
                    .Arm("overlap-uniform2", "overlap", testing::FullRecompute("uniform", 2))
                    .Text());
  std::vector<std::string> checks;
  for (const char* arm :
       {"reference", "overlap-segment", "overlap-chunk", "overlap-none", "overlap-uniform2"}) {
    checks.push_back(std::string(arm) + ": peak memory vs model");
  }
  ExpectPasses(recipe, checks);
}

}  // namespace
}  // namespace bitparity

// The overlap arm's recompute modes give bitwise the same results: none, chunk (the whole chunk
// replayed at once) and segment (per layer group), and so do the reference arm's.

#include <gtest/gtest.h>

#include "config/recipe.h"
#include "tests/support/recipe_builder.h"
#include "tests/support/test_support.h"
#include "tests/support/thread_trainer.h"

namespace bitparity {
namespace {

std::string RecipeToml() {
  const std::string chunk = R"(recompute = { granularity = "full", unit = "chunk" })";
  return testing::RecipeBuilder(4, 1)
      .Set("train.global_batch", 16)
      .Set("train.iterations", 2)
      .Set("precision.recipe", "fp32")
      .Arm("none", "overlap")
      .Arm("chunk", "overlap", chunk)
      .Arm("segment", "overlap",
           R"(recompute = { granularity = "full", method = "uniform", num_layers = 1 })")
      .Arm("reference_chunk", "reference", chunk)
      .Arm("reference_none", "reference")
      .Text();
}

TEST(RecomputeModes, NoneChunkAndSegmentAreBitwiseEqual) {
  Recipe recipe = ParseRecipe(RecipeToml(), "modes.toml");
  testing::RankRecords none = testing::TrainOnThreads(recipe, "none");
  EXPECT_EQ(testing::FirstDifference(none, testing::TrainOnThreads(recipe, "chunk")), "");
  EXPECT_EQ(testing::FirstDifference(none, testing::TrainOnThreads(recipe, "segment")), "");
  EXPECT_EQ(testing::FirstDifference(none, testing::TrainOnThreads(recipe, "reference_chunk")), "");
  EXPECT_EQ(testing::FirstDifference(none, testing::TrainOnThreads(recipe, "reference_none")), "");
}

}  // namespace
}  // namespace bitparity

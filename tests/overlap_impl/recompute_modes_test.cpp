// The overlap arm's recompute modes give bitwise the same results: none, chunk (the whole chunk
// replayed at once) and segment (per layer group), and so do the reference arm's.

#include <gtest/gtest.h>

#include "core/recipe.h"
#include "tests/support/test_support.h"
#include "tests/support/thread_trainer.h"

namespace bitparity {
namespace {

std::string RecipeToml() {
  return testing::SmallModelTable(4, 1) + R"([parallel]
ep = 2
[train]
micro_batch = 2
global_batch = 16
iterations = 2
[precision]
recipe = "fp32"
[arms.none]
engine = "overlap"
[arms.chunk]
engine = "overlap"
recompute = { granularity = "full", unit = "chunk" }
[arms.segment]
engine = "overlap"
recompute = { granularity = "full", method = "uniform", num_layers = 1 }
[arms.reference_chunk]
engine = "reference"
recompute = { granularity = "full", unit = "chunk" }
[arms.reference_none]
engine = "reference"
)";
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

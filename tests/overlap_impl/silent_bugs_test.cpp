// Each silent bug met while building the overlap path (and the seed's own)
// is re-created through InjectedBugs and must be caught: either the arms stop agreeing bit for
// bit, or the run fails outright. Without the bug the same configuration agrees (the parity
// matrix checks that for every configuration).

#include <gtest/gtest.h>

#include <algorithm>

#include "config/recipe.h"
#include "tests/support/recipe_builder.h"
#include "tests/support/test_support.h"
#include "tests/support/thread_trainer.h"

namespace bitparity {
namespace {

std::string RecipeText(int mtp_layers, const std::string& recompute, int layers = 3) {
  return testing::RecipeBuilder(layers, mtp_layers)
      .Set("train.iterations", 2)
      .Set("precision.recipe", "fp32")
      .Arm("reference", "reference", "recompute = " + recompute)
      .Arm("reference_none", "reference")
      .Arm("overlap", "overlap", "recompute = " + recompute)
      .Text();
}

const char kNone[] = "{ granularity = \"none\" }";
const char kUniform1[] = "{ granularity = \"full\", method = \"uniform\", num_layers = 1 }";

// One bug of the overlap arm's share, or of the model's, switched on.
InjectedBugs OverlapBug(bool OverlapBugs::*bug) {
  InjectedBugs bugs;
  bugs.overlap.*bug = true;
  return bugs;
}
InjectedBugs ModelBug(bool ModelBugs::*bug) {
  InjectedBugs bugs;
  bugs.model.*bug = true;
  return bugs;
}

testing::ThreadTrainOptions TrainingWith(const InjectedBugs& bugs) {
  testing::ThreadTrainOptions options;
  options.bugs = bugs;
  return options;
}

// The difference between `arm` with the bug and `against` without it, or "failed: ..." when
// the run with the bug could not complete.
std::string WithBug(const Recipe& recipe, const std::string& arm, const std::string& against,
                    InjectedBugs bugs) {
  testing::RankRecords clean = testing::TrainOnThreads(recipe, against);
  testing::ThreadTrainOptions options = TrainingWith(bugs);
  options.timeout = std::chrono::seconds(5);
  try {
    return testing::FirstDifference(clean, testing::TrainOnThreads(recipe, arm, options));
  } catch (const std::exception& e) {
    return std::string("failed: ") + e.what();
  }
}

TEST(SilentBugs, RoutingMetadataSharedAcrossMicrobatchesIsCaught) {
  // Four layers, layers 1-3 MoE: in the combined step F(k+1) | B(k), forward layer 1 of F(k+1)
  // runs before backward layer 1 of B(k) (which is paired with forward layer 2), so the unpermute
  // backward of B(k) layer 1 reads F(k+1)'s permutation. Nothing fails and the first
  // iteration's losses are unchanged; layer 1's gradients and everything below it are wrong.
  Recipe recipe = ParseRecipe(RecipeText(0, kNone, 4), "bug.toml");
  const InjectedBugs bugs = OverlapBug(&OverlapBugs::stale_routing_metadata);
  const testing::ThreadTrainOptions options = TrainingWith(bugs);
  testing::RankRecords reference = testing::TrainOnThreads(recipe, "reference");
  testing::RankRecords buggy = testing::TrainOnThreads(recipe, "overlap", options);
  const std::string difference = testing::FirstDifference(reference, buggy);
  EXPECT_NE(difference, "");
  for (const char* loss : {"iteration 1, rank 0: loss", "iteration 1, rank 0: lm_loss"}) {
    EXPECT_EQ(difference.find(loss), std::string::npos) << difference;
  }
  std::vector<std::string> differing = testing::DifferingGrads(reference, buggy, 1, 0);
  auto differs = [&](const std::string& prefix) {
    return std::any_of(differing.begin(), differing.end(),
                       [&](const std::string& name) { return name.rfind(prefix, 0) == 0; });
  };
  EXPECT_TRUE(differs("layers.1.")) << difference;
  EXPECT_TRUE(differs("embedding")) << difference;
  // Layers above the stale read (backwarded before F(k+1) reached them) are untouched.
  EXPECT_FALSE(differs("layers.3.")) << difference;
  EXPECT_FALSE(differs("layers.2.")) << difference;
  EXPECT_FALSE(differs("head")) << difference;
  std::printf("stale routing metadata: %zu parameters differ at iteration 1, first: %s\n",
              differing.size(), difference.c_str());
  // One microbatch per rank never interleaves, so the same bug is invisible there: the reason the
  // parity matrix runs several microbatches through the combined schedule.
  Recipe one = testing::RecipeBuilder(4, 0)
                   .Set("train.global_batch", 4)
                   .Set("train.iterations", 2)
                   .Set("precision.recipe", "fp32")
                   .Arm("reference", "reference")
                   .Arm("overlap", "overlap")
                   .Build("one_microbatch.toml");
  EXPECT_EQ(WithBug(one, "overlap", "reference", bugs), "");
}

TEST(SilentBugs, ChunkStateSnapshotNotRestoredBeforeReplayIsCaught) {
  // The MTP replay rolls the token ids a second time.
  Recipe recipe = ParseRecipe(RecipeText(1, kUniform1), "bug.toml");
  const InjectedBugs bugs = OverlapBug(&OverlapBugs::skip_snapshot_restore);
  std::string difference = WithBug(recipe, "overlap", "reference", bugs);
  EXPECT_NE(difference, "");
  std::printf("snapshot not restored: %s\n", difference.c_str());
  // Silent in the training loss: only the aux-loss record (rewritten by the replay) and the
  // gradients show it.
  for (const char* loss : {": loss", ": lm_loss", ": mtp_loss"}) {
    EXPECT_EQ(difference.find(loss), std::string::npos) << difference;
  }
}

TEST(SilentBugs, MtpPostProcessOutsideTheRecomputeScopeIsCaught) {
  // The seed's bug: the concatenation built without grad anchors the decoder output on a stale
  // leaf and drops the decoder's gradient through the MTP branch.
  Recipe recipe = ParseRecipe(RecipeText(1, kUniform1), "bug.toml");
  const InjectedBugs bugs = OverlapBug(&OverlapBugs::mtp_post_outside_segment);
  const testing::ThreadTrainOptions options = TrainingWith(bugs);
  testing::RankRecords reference = testing::TrainOnThreads(recipe, "reference");
  testing::RankRecords buggy = testing::TrainOnThreads(recipe, "overlap", options);
  std::vector<std::string> differing = testing::DifferingGrads(reference, buggy, 1, 0);
  // The decoder loses the main-loss gradient that reached it through the MTP branch: its
  // parameters (a layernorm weight first among them) differ; the MTP depth's own do not.
  EXPECT_NE(std::find(differing.begin(), differing.end(), "final_norm"), differing.end());
  EXPECT_NE(std::find(differing.begin(), differing.end(), "layers.2.attention.norm"),
            differing.end());
  for (const std::string& name : differing) {
    EXPECT_NE(name.rfind("mtp.", 0), 0u) << name << " should not be affected";
  }
}

TEST(SilentBugs, PerCallGradientFlushIsCaught) {
  // The embedding's two contributions get added to the main grad in two steps.
  Recipe recipe = ParseRecipe(RecipeText(1, kNone), "bug.toml");
  const InjectedBugs bugs = OverlapBug(&OverlapBugs::flush_per_backward_call);
  std::string difference = WithBug(recipe, "overlap", "reference", bugs);
  EXPECT_NE(difference.find("grad"), std::string::npos) << difference;
  std::printf("per-call flush: %s\n", difference.c_str());
}

TEST(SilentBugs, NormInputReachedByTwoEdgesIsCaught) {
  // fp32 composite RMSNorm: the MTP hidden input receives three contributions whose order
  // differs between one graph and node-by-node backward.
  Recipe recipe = ParseRecipe(RecipeText(1, kNone), "bug.toml");
  const InjectedBugs bugs = ModelBug(&ModelBugs::composite_rms_norm);
  const testing::ThreadTrainOptions options = TrainingWith(bugs);
  std::string difference =
      testing::FirstDifference(testing::TrainOnThreads(recipe, "reference", options),
                               testing::TrainOnThreads(recipe, "overlap", options));
  EXPECT_NE(difference, "");
}

TEST(SilentBugs, AuxLossAddedToTheLossIsCaught) {
  // Under recompute the aux gradient of checkpointed layers is lost (reference arm), and the
  // overlap arm cannot backpropagate it across node boundaries at all.
  Recipe recipe = ParseRecipe(RecipeText(0, kUniform1), "bug.toml");
  const InjectedBugs bugs = ModelBug(&ModelBugs::aux_loss_in_objective);
  const testing::ThreadTrainOptions options = TrainingWith(bugs);
  EXPECT_NE(testing::FirstDifference(testing::TrainOnThreads(recipe, "reference_none", options),
                                     testing::TrainOnThreads(recipe, "reference", options)),
            "");
  EXPECT_NE(WithBug(recipe, "overlap", "reference", bugs), "");
}

}  // namespace
}  // namespace bitparity

// Full activation recompute is bitwise neutral in the reference arm: for mtp_layers 0 and 1 and
// fp32 and bf16, recompute none vs (uniform,1), (uniform,2), (block,1), (block,3) on a 3-layer
// model give the same losses, gradients and parameters over several iterations.

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "comm/communicator.h"
#include "config/recipe.h"
#include "core/errors.h"
#include "numerics/float_bits.h"
#include "runtime/trainer.h"
#include "tests/support/recipe_builder.h"
#include "tests/support/test_support.h"

namespace bitparity {
namespace {

std::string RecipeText(int mtp_layers, const std::string& precision) {
  testing::RecipeBuilder recipe(3, mtp_layers);
  recipe.Set("parallel.ep", 1)
      .Set("train.global_batch", 6)
      .Set("train.lr", 1e-2)
      .Set("precision.recipe", precision)
      .Arm("none", "reference")
      .Arm("uniform1", "reference", testing::FullRecompute("uniform", 1))
      .Arm("block1", "reference", testing::FullRecompute("block", 1))
      .Arm("block3", "reference", testing::FullRecompute("block", 3));
  if (mtp_layers == 0) recipe.Arm("uniform2", "reference", testing::FullRecompute("uniform", 2));
  return recipe.Text();
}

std::vector<IterationRecord> Train(const Recipe& recipe, const std::string& arm) {
  ParallelLayout layout = ParallelLayout::Make(0, 1, 1, recipe.model.experts);
  Trainer trainer(recipe, recipe.arm(arm), layout, Communicator::Local());
  std::vector<IterationRecord> records;
  for (int64_t it = 1; it <= recipe.train.iterations; ++it) {
    records.push_back(trainer.RunIteration(it, nullptr));
  }
  return records;
}

void ExpectBitIdentical(const std::vector<IterationRecord>& a,
                        const std::vector<IterationRecord>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    SCOPED_TRACE(what + ", iteration " + std::to_string(a[i].iteration));
    EXPECT_EQ(FloatBits(a[i].loss), FloatBits(b[i].loss));
    EXPECT_EQ(FloatBits(a[i].lm_loss), FloatBits(b[i].lm_loss));
    EXPECT_EQ(FloatBits(a[i].mtp_loss), FloatBits(b[i].mtp_loss));
    EXPECT_EQ(FloatBits(a[i].aux_loss), FloatBits(b[i].aux_loss));
    EXPECT_EQ(DoubleBits(a[i].grad_norm), DoubleBits(b[i].grad_norm));
    EXPECT_EQ(a[i].grad_digests, b[i].grad_digests);
    EXPECT_EQ(a[i].param_digests, b[i].param_digests);
  }
}

struct Config {
  int mtp_layers;
  std::string precision;
};

class RecomputeNeutralityTest : public ::testing::TestWithParam<Config> {};

TEST_P(RecomputeNeutralityTest, EveryMethodMatchesNoRecomputeBitwise) {
  const Config& c = GetParam();
  Recipe recipe = ParseRecipe(RecipeText(c.mtp_layers, c.precision), "neutrality.toml");
  std::vector<IterationRecord> baseline = Train(recipe, "none");
  ASSERT_EQ(baseline.size(), 3u);
  EXPECT_LT(baseline.back().loss, baseline.front().loss) << "the model should be learning";
  for (const ArmConfig& arm : recipe.arms) {
    if (arm.name == "none") continue;
    ExpectBitIdentical(baseline, Train(recipe, arm.name), arm.name);
  }
}

TEST_P(RecomputeNeutralityTest, ReproducesItselfInOneProcess) {
  const Config& c = GetParam();
  Recipe recipe = ParseRecipe(RecipeText(c.mtp_layers, c.precision), "neutrality.toml");
  ExpectBitIdentical(Train(recipe, "uniform1"), Train(recipe, "uniform1"), "rerun");
}

INSTANTIATE_TEST_SUITE_P(Matrix, RecomputeNeutralityTest,
                         ::testing::Values(Config{0, "fp32"}, Config{1, "fp32"}, Config{0, "bf16"},
                                           Config{1, "bf16"}),
                         [](const ::testing::TestParamInfo<Config>& info) {
                           return "mtp" + std::to_string(info.param.mtp_layers) + "_" +
                                  info.param.precision;
                         });

TEST(RecomputeNeutrality, UniformTwoWithMtpIsRejected) {
  std::string text = RecipeText(1, "fp32") +
                     "\n[arms.uniform2]\nengine = \"reference\"\nrecompute = { granularity = "
                     "\"full\", method = \"uniform\", num_layers = 2 }\n";
  EXPECT_THROW(ParseRecipe(text, "bad.toml"), InputError);
}

// The check must be able to fail: a one-ulp change in one gradient element changes a digest.
TEST(RecomputeNeutrality, OneUlpPerturbationIsDetected) {
  Recipe recipe = ParseRecipe(RecipeText(0, "fp32"), "neutrality.toml");
  ParallelLayout layout = ParallelLayout::Make(0, 1, 1, recipe.model.experts);
  Trainer clean(recipe, recipe.arm("none"), layout, Communicator::Local());
  Trainer perturbed(recipe, recipe.arm("none"), layout, Communicator::Local());
  GradPerturbation p;
  p.rank = 0;
  p.iteration = 2;
  p.param = "layers.1.attention.qkv";
  p.element = 5;
  perturbed.set_perturbation(p);
  IterationRecord a1 = clean.RunIteration(1, nullptr), b1 = perturbed.RunIteration(1, nullptr);
  EXPECT_EQ(a1.grad_digests, b1.grad_digests);
  IterationRecord a2 = clean.RunIteration(2, nullptr), b2 = perturbed.RunIteration(2, nullptr);
  int differing = 0;
  for (size_t i = 0; i < a2.grad_digests.size(); ++i)
    differing += a2.grad_digests[i] != b2.grad_digests[i];
  EXPECT_EQ(differing, 1);
}

}  // namespace
}  // namespace bitparity

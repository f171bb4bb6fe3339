// The FP8 recipes keep every guarantee of BF16: each arm reproduces itself, the overlap arm is
// bitwise equal to the reference arm, and recompute on equals recompute off (current scaling:
// a replay derives the same scales from the same tensors). And FP8 training stays close to
// BF16 training on the default recipe.

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <sstream>

#include "config/recipe.h"
#include "tests/support/recipe_builder.h"
#include "tests/support/test_support.h"
#include "tests/support/thread_trainer.h"

namespace bitparity {
namespace {

struct Fp8Config {
  std::string precision;
  int mtp_layers;
  std::string recompute;  // "uniform" or "block"
};

std::string RecipeText(const Fp8Config& c) {
  const std::string recompute = c.recompute == "uniform" ? testing::FullRecompute("uniform", 1)
                                                         : testing::FullRecompute("block", 3);
  // Wider than the small model, so that FP8 blocks of 32 and 128 both fit.
  return testing::RecipeBuilder(3, c.mtp_layers)
      .ModelShape(64, 64, 160, 64, 16)
      .Set("train.lr", 1e-2)
      .Set("precision.recipe", c.precision)
      .ParityArms(recompute)
      .Text();
}

class Fp8ParityTest : public ::testing::TestWithParam<Fp8Config> {};

TEST_P(Fp8ParityTest, ReproducibleAndBitwiseEqualAcrossArmsAndRecompute) {
  Recipe recipe = ParseRecipe(RecipeText(GetParam()), "fp8.toml");
  const testing::RankRecords overlap = testing::ExpectOverlapEqualsReferences(recipe);
  EXPECT_EQ(testing::FirstDifference(overlap, testing::TrainOnThreads(recipe, "overlap")), "")
      << "the overlap arm reproduces itself";
}

INSTANTIATE_TEST_SUITE_P(
    Recipes, Fp8ParityTest,
    ::testing::Values(Fp8Config{"blockwise", 0, "uniform"}, Fp8Config{"blockwise", 1, "uniform"},
                      Fp8Config{"blockwise", 1, "block"}, Fp8Config{"mxfp8", 0, "uniform"},
                      Fp8Config{"mxfp8", 1, "uniform"}, Fp8Config{"mxfp8", 1, "block"}),
    [](const ::testing::TestParamInfo<Fp8Config>& info) {
      return info.param.precision + "_mtp" + std::to_string(info.param.mtp_layers) + "_" +
             info.param.recompute;
    });

TEST(Fp8Training, StaysCloseToBf16OnTheDefaultRecipe) {
  std::string text = testing::ReadFile(testing::SourceDir() + "/recipes/default.toml");
  text += R"(
[arms.blockwise]
engine = "reference"
precision = { recipe = "blockwise" }
[arms.mxfp8]
engine = "reference"
precision = { recipe = "mxfp8" }
)";
  Recipe recipe = ParseRecipe(text, "default+fp8.toml");
  testing::RankRecords bf16 = testing::TrainOnThreads(recipe, "reference");
  for (const char* arm : {"blockwise", "mxfp8"}) {
    testing::RankRecords fp8 = testing::TrainOnThreads(recipe, arm);
    double worst = 0;
    for (size_t i = 0; i < bf16.records[0].size(); ++i) {
      const double a = bf16.records[0][i].loss, b = fp8.records[0][i].loss;
      worst = std::max(worst, std::fabs(a - b) / a);
    }
    const double last_bf16 = bf16.records[0].back().loss, last_fp8 = fp8.records[0].back().loss;
    const double last = std::fabs(last_fp8 - last_bf16) / last_bf16;
    std::printf(
        "%s vs bf16 on the default recipe: largest relative loss difference over %zu "
        "iterations %.4f, at the last iteration %.4f\n",
        arm, bf16.records[0].size(), worst, last);
    // Measured here (LibTorch 2.11, MKL and oneDNN): 12.4% (blockwise) and 12.7% (mxfp8), both at
    // iteration 9, where both FP8 runs spike together (4.37 vs 3.89) and recover; 2.1% for both
    // at the last iteration. With quantization switched off, the FP8 code path reproduces bf16 bit
    // for bit, so the difference is the quantization's. (LibTorch 1.13 gave 3.7% and 2.1% worst.)
    EXPECT_LT(worst, 0.2) << arm;
    EXPECT_LT(last, 0.05) << arm;
    EXPECT_GT(worst, 0.0) << arm << " should not be bit-identical to bf16";
  }
}

}  // namespace
}  // namespace bitparity

// The FP8 recipes keep every guarantee of BF16: each arm reproduces itself, the overlap arm is
// bitwise equal to the reference arm, and recompute on equals recompute off (current scaling:
// a replay derives the same scales from the same tensors). And FP8 training stays close to
// BF16 training on the default recipe.

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <sstream>

#include "core/recipe.h"
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
  const std::string recompute =
      c.recompute == "uniform" ? "{ granularity = \"full\", method = \"uniform\", num_layers = 1 }"
                               : "{ granularity = \"full\", method = \"block\", num_layers = 3 }";
  return R"(
[model]
hidden = 64
heads = 4
layers = 3
first_k_dense = 1
experts = 4
topk = 2
moe_ffn = 64
ffn = 160
vocab = 64
seq_len = 16
mtp_layers = )" +
         std::to_string(c.mtp_layers) + R"(
[parallel]
ep = 2
[train]
micro_batch = 2
global_batch = 12
iterations = 3
lr = 1e-2
[precision]
recipe = ")" +
         c.precision + R"("
[arms.reference]
engine = "reference"
recompute = )" +
         recompute + R"(
[arms.overlap]
engine = "overlap"
recompute = )" +
         recompute + R"(
[arms.reference_none]
engine = "reference"
)";
}

class Fp8ParityTest : public ::testing::TestWithParam<Fp8Config> {};

TEST_P(Fp8ParityTest, ReproducibleAndBitwiseEqualAcrossArmsAndRecompute) {
  Recipe recipe = ParseRecipe(RecipeText(GetParam()), "fp8.toml");
  testing::RankRecords reference = testing::TrainOnThreads(recipe, "reference");
  EXPECT_EQ(testing::FirstDifference(reference, testing::TrainOnThreads(recipe, "reference")), "");
  testing::RankRecords overlap = testing::TrainOnThreads(recipe, "overlap");
  EXPECT_EQ(testing::FirstDifference(reference, overlap), "");
  EXPECT_EQ(testing::FirstDifference(testing::TrainOnThreads(recipe, "reference_none"), overlap),
            "");
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

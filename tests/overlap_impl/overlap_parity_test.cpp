// The point of the project: the overlap arm's losses and every parameter gradient (embedding
// and output head included) are bitwise equal to the reference arm's with the same recompute
// settings, over mtp_layers {0, 1} x dispatcher {alltoall, flex} x precision {fp32, bf16} x
// recompute {(uniform,1), (uniform,2), (block,1), (block,3)} on a 3-decoder-layer model with
// EP 2, several microbatches and iterations; and to the reference without recompute.

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "config/recipe.h"
#include "core/errors.h"
#include "tests/support/recipe_builder.h"
#include "tests/support/test_support.h"
#include "tests/support/thread_trainer.h"

namespace bitparity {
namespace {

struct ParityConfig {
  int mtp_layers;
  std::string dispatcher;
  std::string precision;
  std::string method;
  int num_layers;
};

std::string Name(const ParityConfig& c) {
  return "mtp" + std::to_string(c.mtp_layers) + "_" + c.dispatcher + "_" + c.precision + "_" +
         c.method + std::to_string(c.num_layers);
}

std::string RecipeText(const ParityConfig& c) {
  return testing::RecipeBuilder(3, c.mtp_layers)
      .Set("model.dispatcher", c.dispatcher)
      .Set("train.lr", 1e-2)
      .Set("precision.recipe", c.precision)
      .ParityArms(testing::FullRecompute(c.method, c.num_layers))
      .Text();
}

class OverlapParityTest : public ::testing::TestWithParam<ParityConfig> {};

TEST_P(OverlapParityTest, BitwiseEqualToTheReferenceArm) {
  Recipe recipe = ParseRecipe(RecipeText(GetParam()), Name(GetParam()) + ".toml");
  const testing::RankRecords overlap = testing::ExpectOverlapEqualsReferences(recipe);
  // The comparison covers every parameter on every rank, embedding and head included.
  for (const auto& params : overlap.params) {
    EXPECT_NE(std::find(params.begin(), params.end(), "embedding"), params.end());
    EXPECT_NE(std::find(params.begin(), params.end(), "head"), params.end());
  }
}

std::vector<ParityConfig> Matrix() {
  std::vector<ParityConfig> configs;
  for (int mtp : {0, 1}) {
    for (const char* dispatcher : {"alltoall", "flex"}) {
      for (const char* precision : {"fp32", "bf16"}) {
        for (auto [method, k] : std::vector<std::pair<const char*, int>>{
                 {"uniform", 1}, {"uniform", 2}, {"block", 1}, {"block", 3}}) {
          if (mtp > 0 && std::string(method) == "uniform" && k != 1) continue;  // invalid
          configs.push_back({mtp, dispatcher, precision, method, k});
        }
      }
    }
  }
  return configs;
}

INSTANTIATE_TEST_SUITE_P(Matrix, OverlapParityTest, ::testing::ValuesIn(Matrix()),
                         [](const ::testing::TestParamInfo<ParityConfig>& info) {
                           return Name(info.param);
                         });

// The replica check of the parity tests sees a one-ulp change of one element of one rank's
// replicated main grad: the step then moves that rank's copy of the parameter apart.
TEST(OverlapParity, ReplicaCheckSeesOneUlpOnOneRank) {
  Recipe recipe = ParseRecipe(RecipeText({0, "alltoall", "bf16", "uniform", 1}), "replica.toml");
  testing::ThreadTrainOptions options;
  options.on_trainer = [](int64_t rank, Trainer& trainer) {
    GradPerturbation p;
    p.rank = 1;
    p.iteration = 2;
    p.param = "embedding";
    p.element = 5;
    if (rank == 1) trainer.set_perturbation(p);
  };
  const testing::RankRecords records = testing::TrainOnThreads(recipe, "reference", options);
  EXPECT_EQ(testing::ReplicaDivergence(records),
            "iteration 2: main grad of embedding differs between rank 0 and rank 1");
  EXPECT_EQ(testing::ReplicaDivergence(testing::TrainOnThreads(recipe, "reference")), "");
}

TEST(OverlapParity, UniformTwoWithMtpIsRejectedLikeUpstream) {
  ParityConfig c{1, "alltoall", "fp32", "uniform", 2};
  EXPECT_THROW(ParseRecipe(RecipeText(c), "bad.toml"), InputError);
}

}  // namespace
}  // namespace bitparity

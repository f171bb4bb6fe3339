// Delayed weight gradients ([arms.NAME] delay_wgrad, Megatron's --delay-wgrad-compute): the attn
// and mlp backward compute input gradients only, the plan's wgrad operations the weight
// gradients later. The GEMMs are autograd's own, operand for operand, so the overlap arm stays
// bitwise equal to the reference arm with it on and off, over bf16, fp32, both FP8 recipes, MTP,
// mHC, recompute on and off, and a pipeline.

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <map>
#include <string>
#include <vector>

#include "config/recipe.h"
#include "core/errors.h"
#include "model/ops.h"
#include "overlap_impl/combined_step_plan.h"
#include "tests/support/random_tensor.h"
#include "tests/support/recipe_builder.h"
#include "tests/support/thread_trainer.h"

namespace bitparity {
namespace {

// The gradients of one Linear (input and weight) for `x` and `g`, with the weight gradient
// delayed or not.
struct LinearGrads {
  at::Tensor dx;
  at::Tensor dw;
};
LinearGrads GradsOf(const at::Tensor& x_value, const at::Tensor& w_value, const at::Tensor& g,
                    const PrecisionConfig& precision, bool delayed) {
  at::Tensor x = x_value.clone().requires_grad_(true);
  at::Tensor w = w_value.clone().requires_grad_(true);
  ops::DelayedWgrads wgrads;
  at::Tensor y;
  {
    const ops::DelayWgradScope scope(delayed ? &wgrads : nullptr);
    y = ops::Linear(x, w, precision);
  }
  y.backward(g);
  EXPECT_EQ(wgrads.size(), delayed ? 1u : 0u);
  if (delayed) {
    EXPECT_FALSE(w.grad().defined()) << "the weight gradient waits for Run";
    wgrads.Run();
    EXPECT_TRUE(wgrads.empty());
  }
  return {x.grad(), w.grad()};
}

bool BitwiseEqual(const at::Tensor& a, const at::Tensor& b) {
  return a.defined() && b.defined() && a.sizes() == b.sizes() && a.dtype() == b.dtype() &&
         at::equal(a.contiguous().view(at::kByte), b.contiguous().view(at::kByte));
}

TEST(DelayedWgrad, LinearGradientsAreAutogradsBitForBit) {
  const std::map<std::string, PrecisionRecipe> recipes = {
      {"bf16", PrecisionRecipe::kBf16},
      {"fp32", PrecisionRecipe::kFp32},
      {"blockwise", PrecisionRecipe::kBlockwise},
      {"mxfp8", PrecisionRecipe::kMxfp8}};
  for (const auto& [recipe, value] : recipes) {
    PrecisionConfig precision;
    precision.recipe = value;
    const at::ScalarType dtype =
        precision.recipe == PrecisionRecipe::kFp32 ? at::kFloat : at::kBFloat16;
    // A 3-d activation (attention's), a 2-d one (an expert's rows) and a column-major one.
    const at::Tensor w = testing::RandomNormal({96, 128}, 1, 0).to(dtype);
    const std::vector<at::Tensor> inputs = {testing::RandomNormal({2, 16, 128}, 1, 1).to(dtype),
                                            testing::RandomNormal({40, 128}, 1, 2).to(dtype),
                                            testing::RandomNormal({128, 40}, 1, 3).to(dtype).t()};
    for (size_t i = 0; i < inputs.size(); ++i) {
      SCOPED_TRACE(recipe + ", input " + std::to_string(i));
      std::vector<int64_t> out_shape = inputs[i].sizes().vec();
      out_shape.back() = 96;
      const at::Tensor g = testing::RandomNormal(out_shape, 1, 10 + i).to(dtype);
      const LinearGrads now = GradsOf(inputs[i], w, g, precision, /*delayed=*/false);
      const LinearGrads later = GradsOf(inputs[i], w, g, precision, /*delayed=*/true);
      EXPECT_TRUE(BitwiseEqual(now.dx, later.dx));
      EXPECT_TRUE(BitwiseEqual(now.dw, later.dw));
    }
  }
}

TEST(DelayedWgrad, RunAddsToAnExistingGradientAsAutogradWould) {
  at::Tensor w = testing::RandomNormal({8, 16}, 2, 0).to(at::kBFloat16).requires_grad_(true);
  const at::Tensor x = testing::RandomNormal({4, 16}, 2, 1).to(at::kBFloat16);
  const at::Tensor g = testing::RandomNormal({4, 8}, 2, 2).to(at::kBFloat16);
  PrecisionConfig bf16;
  bf16.recipe = PrecisionRecipe::kBf16;
  // Two contributions the autograd way, then the first the autograd way and the second delayed.
  ops::Linear(x, w, bf16).backward(g);
  ops::Linear(x * 2, w, bf16).backward(g);
  const at::Tensor expected = w.grad().clone();
  w.mutable_grad() = at::Tensor();
  ops::Linear(x, w, bf16).backward(g);
  ops::DelayedWgrads wgrads;
  {
    const ops::DelayWgradScope scope(&wgrads);
    ops::Linear(x * 2, w, bf16).backward(g);
  }
  wgrads.Run();
  EXPECT_TRUE(BitwiseEqual(w.grad(), expected));
}

// One wgrad operation per backward attn and mlp; mlp's right after the layer's dispatch
// backward, attn's at the end of its layer pair, the last backward layer's after the step's sends.
TEST(DelayedWgrad, PlanIssuesOneWgradPerBackwardNode) {
  const Recipe recipe = testing::RecipeBuilder(3, 1)
                            .Arm("o", "overlap", testing::FullRecompute("uniform", 1))
                            .Build("plan.toml");
  const RecomputeConfig& full = recipe.arm("o").recompute;
  const CombinedStepPlan plain = BuildCombinedStepPlan(recipe.model, 4, full);
  const CombinedStepPlan delayed = BuildCombinedStepPlan(recipe.model, 4, full, true);
  std::map<std::pair<int, int>, int> backward, wgrad;  // (node, microbatch * 100 + layer)
  for (const NodeOp& op : plain.ops) EXPECT_NE(op.phase, Phase::kWgrad);
  for (size_t i = 0; i < delayed.ops.size(); ++i) {
    const NodeOp& op = delayed.ops[i];
    const auto key =
        std::make_pair(static_cast<int>(op.node), static_cast<int>(op.microbatch * 100 + op.layer));
    if (op.phase == Phase::kBackward && (op.node == NodeKind::kAttn || op.node == NodeKind::kMlp)) {
      ++backward[key];
    }
    if (op.phase != Phase::kWgrad) continue;
    ++wgrad[key];
    ASSERT_GT(i, 0u);
    const NodeOp& before = delayed.ops[i - 1];
    if (op.node == NodeKind::kMlp) {
      EXPECT_EQ(before.node, NodeKind::kDispatch);
      EXPECT_EQ(before.phase, Phase::kBackward);
      EXPECT_EQ(before.microbatch, op.microbatch);
      EXPECT_EQ(before.layer, op.layer);
    }
    // Its backward came first.
    bool backward_before = false;
    for (size_t j = 0; j < i; ++j) {
      const NodeOp& b = delayed.ops[j];
      backward_before |= b.node == op.node && b.phase == Phase::kBackward &&
                         b.microbatch == op.microbatch && b.layer == op.layer;
    }
    EXPECT_TRUE(backward_before) << "wgrad op " << i;
  }
  EXPECT_EQ(backward, wgrad);
  EXPECT_EQ(backward.size(), 2u * 4 * 4);  // attn and mlp of 4 layers (3 + MTP), 4 microbatches
  EXPECT_EQ(delayed.ops.size(), plain.ops.size() + wgrad.size());
}

struct DelayedWgradCase {
  std::string name;
  int mtp_layers;
  std::string precision;
  std::string recompute;  // an arm override line, "" for none
  bool mhc = false;
  int pp = 1;
};

TEST(DelayedWgrad, RecipeRejectsItOutsideTheOverlapEngine) {
  const std::string text =
      testing::RecipeBuilder(3, 0).Arm("reference", "reference", "delay_wgrad = true").Text();
  try {
    ParseRecipe(text, "bad.toml");
    FAIL() << "a reference arm with delay_wgrad was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(
                  "bad.toml: [arms.reference] delay_wgrad needs engine \"overlap\""),
              std::string::npos)
        << e.what();
  }
  try {
    ParseRecipe(testing::RecipeBuilder(3, 0).Arm("o", "overlap", "delay_wgrad = 1").Text(),
                "bad.toml");
    FAIL() << "delay_wgrad = 1 was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("delay_wgrad must be true or false, got integer 1"),
              std::string::npos)
        << e.what();
  }
}

class DelayedWgradParityTest : public ::testing::TestWithParam<DelayedWgradCase> {};

TEST_P(DelayedWgradParityTest, BitwiseEqualToTheReferenceAndToItselfWithoutDelay) {
  const DelayedWgradCase& c = GetParam();
  testing::RecipeBuilder builder(c.pp > 1 ? 4 : 3, c.mtp_layers);
  builder.ModelShape(64, 64, 160, 64, 16)
      .Set("train.lr", 1e-2)
      .Set("train.iterations", 2)
      .Set("precision.recipe", c.precision);
  if (c.mhc) builder.Set("model.mhc_streams", int64_t{4});
  if (c.pp > 1) builder.TwoChunkPipeline(c.pp);
  builder.Arm("reference", "reference", c.recompute)
      .Arm("overlap", "overlap", c.recompute)
      .Arm("overlap_delayed", "overlap", "delay_wgrad = true\n" + c.recompute);
  const Recipe recipe = builder.Build("delayed.toml");
  const testing::RankRecords reference = testing::TrainOnThreads(recipe, "reference");
  const testing::RankRecords delayed = testing::TrainOnThreads(recipe, "overlap_delayed");
  EXPECT_EQ(testing::FirstDifference(reference, delayed), "");
  EXPECT_EQ(testing::FirstDifference(testing::TrainOnThreads(recipe, "overlap"), delayed), "");
}

INSTANTIATE_TEST_SUITE_P(
    Recipes, DelayedWgradParityTest,
    ::testing::Values(
        DelayedWgradCase{"bf16_mtp1_uniform", 1, "bf16", testing::FullRecompute("uniform", 1)},
        DelayedWgradCase{"bf16_mtp0_none", 0, "bf16", ""},
        DelayedWgradCase{"fp32_mtp1_block", 1, "fp32", testing::FullRecompute("block", 2)},
        DelayedWgradCase{"blockwise_mtp1_uniform", 1, "blockwise",
                         testing::FullRecompute("uniform", 1)},
        DelayedWgradCase{"mxfp8_mtp0_uniform", 0, "mxfp8", testing::FullRecompute("uniform", 1)},
        DelayedWgradCase{"bf16_mhc_mtp1_uniform", 1, "bf16", testing::FullRecompute("uniform", 1),
                         /*mhc=*/true},
        DelayedWgradCase{"bf16_pp2_mtp1_uniform", 1, "bf16", testing::FullRecompute("uniform", 1),
                         /*mhc=*/false, /*pp=*/2}),
    [](const ::testing::TestParamInfo<DelayedWgradCase>& info) { return info.param.name; });

}  // namespace
}  // namespace bitparity

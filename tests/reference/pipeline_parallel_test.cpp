// The reference arm with pipeline parallelism: pp x ep rank threads running Megatron's
// (interleaved) 1F1B over real point-to-point transfers. It reproduces itself bit for bit, and
// against the same model and global batch without a pipeline every loss, grad norm, gradient
// and parameter is bitwise equal, but for the one reduction whose order the pipeline changes:
// with MTP on a later stage, the embedding's two gradient contributions (the token lookup on the
// first stage, the shifted lookup of MTP on its copy) are summed once per iteration instead of
// once per microbatch.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "config/recipe.h"
#include "core/errors.h"
#include "numerics/float_bits.h"
#include "tests/support/recipe_builder.h"
#include "tests/support/thread_trainer.h"
#include "tests/support/thread_world.h"

namespace bitparity {
namespace {

struct PipelineCase {
  int pp;
  int vpp;
  int mtp_layers;
  std::string layout;     // "" : even split
  std::string recompute;  // "" : none
  std::string precision;
};

std::string Name(const PipelineCase& c) {
  std::string n = "pp" + std::to_string(c.pp) + "_vpp" + std::to_string(c.vpp) + "_mtp" +
                  std::to_string(c.mtp_layers) + "_" + c.precision;
  if (!c.layout.empty()) n += "_layout";
  if (!c.recompute.empty()) n += "_recompute";
  return n;
}

// 4 decoder layers, EP 2, 4 microbatches per pipeline; `pp` 1 is the same model without one.
Recipe Build(const PipelineCase& c, int pp) {
  testing::RecipeBuilder builder(4, c.mtp_layers);
  builder.Set("parallel.pp", static_cast<int64_t>(pp))
      .Set("train.global_batch", int64_t{16})
      .Set("train.lr", 1e-2)
      .Set("precision.recipe", c.precision);
  if (pp > 1) {
    builder.Set("parallel.vpp", static_cast<int64_t>(c.vpp));
    if (!c.layout.empty()) builder.Set("model.pipeline_layout", c.layout);
  }
  builder.Arm("reference", "reference", c.recompute.empty() ? "" : c.recompute);
  return builder.Build(Name(c) + ".toml");
}

// Records keyed by (iteration, EP rank, parameter name), so that layouts can be compared.
struct ByName {
  std::map<std::tuple<int64_t, int64_t, std::string>, std::pair<uint64_t, uint64_t>> params;
  std::map<std::pair<int64_t, int64_t>, std::vector<uint32_t>> scalars;  // (iteration, rank)
};

ByName Index(const testing::RankRecords& r, int64_t ep) {
  ByName out;
  for (size_t rank = 0; rank < r.records.size(); ++rank) {
    const int64_t ep_rank = static_cast<int64_t>(rank) % ep;
    for (const IterationRecord& it : r.records[rank]) {
      for (size_t p = 0; p < it.grad_digests.size(); ++p) {
        out.params[{it.iteration, ep_rank, r.params[rank][p]}] = {it.grad_digests[p],
                                                                  it.param_digests[p]};
      }
      uint32_t loss, lm, mtp, aux;
      std::memcpy(&loss, &it.loss, 4);
      std::memcpy(&lm, &it.lm_loss, 4);
      std::memcpy(&mtp, &it.mtp_loss, 4);
      std::memcpy(&aux, &it.aux_loss, 4);
      uint64_t norm;
      std::memcpy(&norm, &it.grad_norm, 8);
      out.scalars[{it.iteration, static_cast<int64_t>(rank)}] = {
          loss, lm, mtp, aux, static_cast<uint32_t>(norm), static_cast<uint32_t>(norm >> 32)};
    }
  }
  return out;
}

class PipelineReferenceTest : public ::testing::TestWithParam<PipelineCase> {};

TEST_P(PipelineReferenceTest, ReproducesItselfAndMatchesTheModelWithoutAPipeline) {
  const PipelineCase& c = GetParam();
  const Recipe piped = Build(c, c.pp);
  const testing::RankRecords first = testing::TrainOnThreads(piped, "reference");
  const testing::RankRecords second = testing::TrainOnThreads(piped, "reference");
  EXPECT_EQ(testing::FirstDifference(first, second), "") << "the pipeline does not reproduce";
  EXPECT_EQ(testing::ReplicaDivergence(first), "");

  const testing::RankRecords flat = testing::TrainOnThreads(Build(c, 1), "reference");
  const ByName a = Index(first, 2), b = Index(flat, 2);
  // With MTP the embedding's gradient differs in its last bits (its two contributions summed per
  // iteration, not per microbatch), and through the grad norm's clipping everything after the
  // first step: compare the first iteration's losses and every other gradient there.
  const bool reordered = c.mtp_layers > 0;
  for (const auto& [key, values] : a.scalars) {
    if (reordered && key.first > 1) continue;
    const int64_t ep_rank = key.second % 2;
    std::vector<uint32_t> mine = values, theirs = b.scalars.at({key.first, ep_rank});
    if (reordered) mine.resize(4), theirs.resize(4);  // losses only: the norm holds the embedding
    EXPECT_EQ(mine, theirs) << "iteration " << key.first << ", rank " << key.second
                            << ": losses or grad norm";
  }
  int compared = 0;
  for (const auto& [key, digests] : a.params) {
    const auto& [iteration, ep_rank, name] = key;
    ASSERT_TRUE(b.params.count(key)) << name;
    if (reordered && (name == "embedding" || iteration > 1)) continue;
    EXPECT_EQ(digests.first, b.params.at(key).first)
        << "iteration " << iteration << ", EP rank " << ep_rank << ": main grad of " << name;
    if (!reordered) {
      EXPECT_EQ(digests.second, b.params.at(key).second)
          << "iteration " << iteration << ", EP rank " << ep_rank << ": " << name
          << " after the step";
    }
    ++compared;
  }
  EXPECT_GT(compared, 20);
}

// Rank 0's main grad of `param` at iteration 1 (rank 0 holds the first stage in either layout).
std::vector<float> FirstRankGrad(const Recipe& recipe, const std::string& param) {
  std::vector<float> values;
  testing::RunOnThreadWorld(recipe.world_size(), [&](int64_t rank, Communicator& comm) {
    std::shared_ptr<Communicator> borrowed(&comm, [](Communicator*) {});
    Trainer trainer(recipe, recipe.arm("reference"),
                    ParallelLayout::Make(rank, recipe.world_size(), recipe.parallel.ep,
                                         recipe.model.experts, recipe.parallel.pp),
                    borrowed);
    std::vector<TensorDump> dumps;
    trainer.RunIteration(1, &dumps);
    for (const TensorDump& d : dumps) {
      if (rank == 0 && d.name == param) values = d.values;
    }
  });
  return values;
}

// The one reordered sum, measured: with MTP the pipeline's embedding gradient differs from the
// flat model's by the rounding of the per-microbatch bf16 sum of its two contributions.
TEST(PipelineReference, MtpEmbeddingGradientDiffersByTheReorderedSumOnly) {
  const PipelineCase c{2, 2, 1, "", "", "bf16"};
  const std::vector<float> piped = FirstRankGrad(Build(c, 2), "embedding");
  const std::vector<float> flat = FirstRankGrad(Build(c, 1), "embedding");
  ASSERT_EQ(piped.size(), flat.size());
  ASSERT_FALSE(piped.empty());
  int64_t differing = 0;
  uint64_t max_ulp = 0;
  float largest = 0, max_diff = 0;
  for (size_t i = 0; i < piped.size(); ++i) {
    largest = std::max(largest, std::fabs(flat[i]));
    if (FloatBits(piped[i]) == FloatBits(flat[i])) continue;
    ++differing;
    max_ulp = std::max(max_ulp, UlpDistance(piped[i], flat[i]));
    max_diff = std::max(max_diff, std::fabs(piped[i] - flat[i]));
  }
  std::printf(
      "embedding main grad, pp 2 vpp 2 vs no pipeline (bf16, MTP 1, iteration 1): %lld of "
      "%zu elements differ, max %llu ulp, max |diff| %.3g = %.3g of the largest element\n",
      static_cast<long long>(differing), piped.size(), static_cast<unsigned long long>(max_ulp),
      max_diff, max_diff / largest);
  EXPECT_GT(differing, 0) << "the sums were expected to be reordered";
  // bf16 keeps 8 significant bits: the reordered rounding stays well within 2^-7 of the largest.
  EXPECT_LE(max_diff, largest / 128);
}

INSTANTIATE_TEST_SUITE_P(
    Configurations, PipelineReferenceTest,
    ::testing::Values(PipelineCase{2, 1, 0, "", "", "fp32"}, PipelineCase{2, 2, 0, "", "", "bf16"},
                      PipelineCase{2, 2, 1, "", "", "bf16"},
                      PipelineCase{2, 2, 1, "", testing::FullRecompute("uniform", 1), "fp32"},
                      PipelineCase{2, 2, 0, "", testing::FullRecompute("block", 1), "bf16"},
                      // Uneven, with an empty stage.
                      PipelineCase{2, 2, 1, "Et|tt||tmL", "", "fp32"},
                      // An MTP-only stage and a loss-only stage (Megatron's mtp_standalone).
                      PipelineCase{4, 2, 1, "Et|t|t|t|||m|L", "", "bf16"}),
    [](const ::testing::TestParamInfo<PipelineCase>& info) { return Name(info.param); });

}  // namespace
}  // namespace bitparity

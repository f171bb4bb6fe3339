// mHC (model/mhc.h) in both arms:
// - the mapping is what its formulas say: H_pre > 0, H_post in (0, 2), H_res doubly stochastic;
// - the overlap arm (with its mhc_post node and the bridge to MTP) equals the reference arm bit
//   for bit, and both equal the reference without recompute, over MTP depths, recompute methods
//   and precisions, with padded samples and dropout;
// - the seed's bug (the bridge gradient looked up where the replayed MTP post-process cleared
//   it) is caught, and the gradients name what it corrupts.

#include "model/mhc.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ostream>
#include <string>
#include <vector>

#include "config/recipe.h"
#include "model/chunk_state_field.h"
#include "overlap_impl/overlap_bugs.h"
#include "tests/support/random_tensor.h"
#include "tests/support/recipe_builder.h"
#include "tests/support/thread_trainer.h"

namespace bitparity {
namespace {

TEST(MhcMapping, GatesAreInRangeAndTheMixingMatrixIsDoublyStochastic) {
  const int64_t n = 4, h = 8;
  MhcWeights w;
  w.mapping = testing::RandomNormal({n * n + 2 * n, n * h}, 3, 1) * 0.3;
  w.alpha_pre = at::full({1}, 0.5);
  w.alpha_post = at::full({1}, 0.5);
  w.alpha_res = at::full({1}, 0.5);
  w.bias = testing::RandomNormal({n * n + 2 * n}, 3, 2);
  const at::Tensor streams = testing::RandomNormal({2, 5, n * h}, 3, 3);
  const MhcMapping m = ComputeMhcMapping(streams, w, n, 20);
  // Sinkhorn-Knopp ends on the columns (as Megatron's); the rows converge with the iterations.
  const MhcMapping converged = ComputeMhcMapping(streams, w, n, 400);
  EXPECT_TRUE(at::allclose(converged.res.sum(-1), at::ones({2, 5, n}), 0, 1e-4));
  EXPECT_GT(m.pre.min().item<float>(), 0.0f);
  EXPECT_LT(m.post.max().item<float>(), 2.0f);
  EXPECT_GT(m.post.min().item<float>(), 0.0f);
  EXPECT_GT(m.res.min().item<float>(), 0.0f);
  EXPECT_TRUE(at::allclose(m.res.sum(-2), at::ones({2, 5, n}), 0, 1e-5));
  EXPECT_TRUE(at::allclose(m.res.sum(-1), at::ones({2, 5, n}), 0, 0.1));
  // Not a constant: the mapping depends on the token.
  EXPECT_FALSE(at::allclose(m.res[0][0], m.res[1][4]));

  // Copied onto the streams and contracted (their mean, Megatron's output_contract): x again.
  const at::Tensor x = testing::RandomNormal({2, 5, h}, 3, 4);
  const at::Tensor expanded = MhcExpand(x, n);
  EXPECT_TRUE(at::equal(expanded.view({2, 5, n, h}).select(2, 3), x));
  EXPECT_TRUE(at::allclose(MhcContract(expanded, n), x));
  const at::Tensor two = at::cat({at::zeros({1, 1, h}), at::full({1, 1, h}, 2.0)}, -1);
  EXPECT_TRUE(at::allclose(MhcContract(two, 2), at::ones({1, 1, h})));
}

// Megatron's _projection_and_get_norm and _compute_h, written out: r = 1 / (||x|| / sqrt(nC) +
// 1e-6) scales the projection; H_pre = sigmoid with no floor. Streams near 1e-6 make the
// epsilon's place matter (inside a square root it would dominate).
TEST(MhcMapping, TheGatesAreMegatronsFormula) {
  const int64_t n = 2, h = 3;
  MhcWeights w;
  w.mapping = testing::RandomNormal({n * n + 2 * n, n * h}, 3, 5);
  w.alpha_pre = at::full({1}, 0.7);
  w.alpha_post = at::full({1}, 0.3);
  w.alpha_res = at::full({1}, 0.5);
  w.bias = testing::RandomNormal({n * n + 2 * n}, 3, 6) * 0.1;
  const at::Tensor streams = testing::RandomNormal({1, 2, n * h}, 3, 7) * 1e-6;
  const MhcMapping m = ComputeMhcMapping(streams, w, n, 3);
  const at::Tensor r =
      1.0 / (streams.norm(2, {-1}, /*keepdim=*/true) / std::sqrt(double{n * h}) + 1e-6);
  const at::Tensor h_all = r * at::matmul(streams, w.mapping.t());
  const at::Tensor pre = at::sigmoid(h_all.narrow(-1, 0, n) * 0.7 + w.bias.narrow(0, 0, n));
  const at::Tensor post = at::sigmoid(h_all.narrow(-1, n, n) * 0.3 + w.bias.narrow(0, n, n)) * 2;
  EXPECT_TRUE(at::allclose(m.pre, pre, 1e-5, 1e-6)) << m.pre << pre;
  EXPECT_TRUE(at::allclose(m.post, post, 1e-5, 1e-6)) << m.post << post;
}

TEST(MhcMapping, TheUpdateMixesTheStreamsAndExpandsTheOutput) {
  const int64_t n = 2, h = 3;
  MhcMapping m;
  m.pre = at::ones({1, 1, n});
  m.post = at::tensor({0.5f, 1.5f}).view({1, 1, n});
  m.res = at::tensor({0.25f, 0.75f, 0.75f, 0.25f}).view({1, 1, n, n});
  const at::Tensor streams = at::tensor({1.f, 2.f, 3.f, 10.f, 20.f, 30.f}).view({1, 1, n * h});
  const at::Tensor output = at::tensor({100.f, 200.f, 300.f}).view({1, 1, h});
  // stream i = sum_j res[i][j] stream_j + post_i output (res symmetric here; see below).
  const at::Tensor expected =
      at::tensor({0.25f * 1 + 0.75f * 10 + 50, 0.25f * 2 + 0.75f * 20 + 100,
                  0.25f * 3 + 0.75f * 30 + 150, 0.75f * 1 + 0.25f * 10 + 150,
                  0.75f * 2 + 0.25f * 20 + 300, 0.75f * 3 + 0.25f * 30 + 450})
          .view({1, 1, n * h});
  EXPECT_TRUE(at::allclose(MhcUpdate(streams, output, m, n), expected));
  EXPECT_TRUE(at::allclose(MhcAggregate(streams, m.pre, n), at::tensor({11.f, 22.f, 33.f})));
  // H_res applied as Megatron's apply_h_res (H_res @ x): row i gives stream i.
  m.res = at::tensor({1.f, 0.f, 0.5f, 0.5f}).view({1, 1, n, n});
  const at::Tensor mixed_only = MhcUpdate(streams, at::zeros({1, 1, h}), m, n);
  EXPECT_TRUE(
      at::allclose(mixed_only, at::tensor({1.f, 2.f, 3.f, 5.5f, 11.f, 16.5f}).view({1, 1, n * h})));
}

// seq_len 16, samples of 9 to 16 tokens, 4 streams.
testing::RecipeBuilder WithMhc(int layers, int mtp_layers) {
  testing::RecipeBuilder builder(layers, mtp_layers);
  builder.Set("model.mhc_streams", int64_t{4})
      .Set("model.mhc_sinkhorn_iterations", int64_t{6})
      .Set("data.min_length", int64_t{9})
      .Set("train.lr", 1e-2);
  return builder;
}

struct MhcParityCase {
  int mtp_layers;
  std::string recompute;  // "none" or method-num_layers
  std::string precision;
  bool dropout;

  std::string name() const {
    std::string r = recompute;
    std::replace(r.begin(), r.end(), '-', '_');
    return "mtp" + std::to_string(mtp_layers) + "_" + r + "_" + precision +
           (dropout ? "_dropout" : "");
  }
};

void PrintTo(const MhcParityCase& c, std::ostream* os) { *os << c.name(); }

class MhcParityTest : public ::testing::TestWithParam<MhcParityCase> {};

TEST_P(MhcParityTest, OverlapEqualsTheReferenceArms) {
  const MhcParityCase& c = GetParam();
  testing::RecipeBuilder builder = WithMhc(3, c.mtp_layers);
  builder.Set("precision.recipe", c.precision).Set("model.dispatcher", "flex");
  if (c.dropout) builder.Set("model.dropout", 0.1).Set("model.attention_dropout", 0.1);
  builder.ParityArms(testing::RecomputeOverride(c.recompute));
  testing::ExpectOverlapEqualsReferences(builder.Build(c.name() + ".toml"));
}

// mtp_layers {0, 1} x recompute none, (uniform, 1), (uniform, 2) (without MTP: Megatron's rule),
// (block, 1..3) x fp32 and bf16; every case with padded samples, dropout on every other one.
std::vector<MhcParityCase> ParityCases() {
  std::vector<MhcParityCase> cases;
  bool dropout = true;
  for (int mtp : {0, 1}) {
    for (const char* recompute :
         {"none", "uniform-1", "uniform-2", "block-1", "block-2", "block-3"}) {
      if (mtp > 0 && std::string(recompute) == "uniform-2") continue;
      for (const char* precision : {"fp32", "bf16"}) {
        cases.push_back({mtp, recompute, precision, dropout});
        dropout = !dropout;
      }
    }
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Configurations, MhcParityTest, ::testing::ValuesIn(ParityCases()),
                         [](const ::testing::TestParamInfo<MhcParityCase>& info) {
                           return info.param.name();
                         });

struct MhcPipelineCase {
  std::string name;
  int pp;
  int layers;
  std::string layout;  // "": the even split over vpp 2
  std::string recompute;
  std::string precision;
};

void PrintTo(const MhcPipelineCase& c, std::ostream* os) { *os << c.name; }

class MhcPipelineParityTest : public ::testing::TestWithParam<MhcPipelineCase> {};

// The streams cross the stage boundaries (n x hidden wide) up to the stage of the final norm:
// the last decoder layer's, where the bridge hands them to the MTP depth, or an MTP-only
// stage's; every case with padded samples and dropout.
TEST_P(MhcPipelineParityTest, OverlapEqualsTheReferenceArms) {
  const MhcPipelineCase& c = GetParam();
  testing::RecipeBuilder builder = WithMhc(c.layers, 1);
  builder.Set("parallel.pp", static_cast<int64_t>(c.pp))
      .Set("train.global_batch", int64_t{16})
      .Set("precision.recipe", c.precision)
      .Set("model.dropout", 0.1)
      .Set("model.attention_dropout", 0.1);
  if (c.layout.empty()) {
    builder.Set("parallel.vpp", int64_t{2});
  } else {
    builder.Set("model.pipeline_layout", c.layout);
  }
  builder.ParityArms(testing::RecomputeOverride(c.recompute));
  const testing::RankRecords overlap =
      testing::ExpectOverlapEqualsReferences(builder.Build(c.name + ".toml"));
  EXPECT_EQ(overlap.records.size(), static_cast<size_t>(c.pp * 2));
}

std::vector<MhcPipelineCase> PipelineCases() {
  std::vector<MhcPipelineCase> cases;
  for (const char* recompute : {"uniform-1", "block-2"}) {
    for (const char* precision : {"fp32", "bf16"}) {
      std::string suffix = std::string(recompute) + "_" + precision;
      std::replace(suffix.begin(), suffix.end(), '-', '_');
      cases.push_back({"pp2_vpp2_" + suffix, 2, 4, "", recompute, precision});
      cases.push_back(
          {"pp4_vpp2_seed_layout_" + suffix, 4, 8, "Et|(t|)*6tmL", recompute, precision});
      // An MTP-only stage: the streams cross to it, its MTP depth splits them (the final norm)
      // and the loss stage after it receives hidden states.
      cases.push_back(
          {"pp4_vpp2_mtp_only_stage_" + suffix, 4, 8, "Et|tt|t|t|t|tt|m|L", recompute, precision});
    }
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Configurations, MhcPipelineParityTest,
                         ::testing::ValuesIn(PipelineCases()),
                         [](const ::testing::TestParamInfo<MhcPipelineCase>& info) {
                           return info.param.name;
                         });

// The overlap arm's silent-bug faults of the chunk state, on the stage that holds the bridge of a
// pp 2 vpp 2 pipeline: a replay that skips one snapshot field, and the seed's bridge bug.
struct MhcPipelineFault {
  std::string name;
  OverlapBugs bugs;
};

void PrintTo(const MhcPipelineFault& c, std::ostream* os) { *os << c.name; }

class MhcPipelineFaultTest : public ::testing::TestWithParam<MhcPipelineFault> {};

TEST_P(MhcPipelineFaultTest, IsCaughtInTheGradients) {
  const Recipe recipe = WithMhc(4, 1)
                            .Set("parallel.pp", int64_t{2})
                            .Set("parallel.vpp", int64_t{2})
                            .Set("train.global_batch", int64_t{16})
                            .Set("train.iterations", int64_t{2})
                            .Set("precision.recipe", "fp32")
                            .ParityArms(testing::FullRecompute("uniform", 1))
                            .Build(GetParam().name + ".toml");
  testing::ThreadTrainOptions options;
  options.bugs.overlap = GetParam().bugs;
  options.timeout = std::chrono::seconds(30);
  const testing::RankRecords reference = testing::TrainOnThreads(recipe, "reference");
  if (GetParam().bugs.snapshot_skips[Index(ChunkStateField::kMhcMultistream)]) {
    // The replayed MTP depth finds the bridge the last MTP post-process cleared.
    try {
      testing::TrainOnThreads(recipe, "overlap", options);
      ADD_FAILURE() << "the run without the bridge completed";
    } catch (const std::exception& e) {
      EXPECT_NE(std::string(e.what()).find("mHC streams"), std::string::npos) << e.what();
    }
    return;
  }
  const std::string difference =
      testing::FirstDifference(reference, testing::TrainOnThreads(recipe, "overlap", options));
  std::printf("%s under pp 2 vpp 2: %s\n", GetParam().name.c_str(), difference.c_str());
  if (GetParam().bugs.snapshot_skips[Index(ChunkStateField::kMtpHiddenStates)]) {
    // Refilled from its input at every pass (see chunk_state_test.cpp): nothing stale to read.
    EXPECT_EQ(difference, "");
    return;
  }
  ASSERT_NE(difference, "");
  // The replays run after the losses: iteration 1's losses are right, its gradients are not.
  EXPECT_EQ(difference.find("iteration 1, rank 0: loss"), std::string::npos) << difference;
}

std::vector<MhcPipelineFault> PipelineFaults() {
  std::vector<MhcPipelineFault> faults;
  for (ChunkStateField field : kChunkStateFields) {
    MhcPipelineFault fault{std::string("snapshot_skips_") + ToString(field), {}};
    fault.bugs.snapshot_skips[Index(field)] = true;
    faults.push_back(fault);
  }
  MhcPipelineFault bridge{"mhc_bridge_from_chunk_state", {}};
  bridge.bugs.mhc_bridge_from_chunk_state = true;
  faults.push_back(bridge);
  return faults;
}

INSTANTIATE_TEST_SUITE_P(Faults, MhcPipelineFaultTest, ::testing::ValuesIn(PipelineFaults()),
                         [](const ::testing::TestParamInfo<MhcPipelineFault>& info) {
                           return info.param.name;
                         });

TEST(MhcBridge, GradientLookedUpInTheClearedChunkStateIsCaught) {
  // The seed's bug: under full recompute the MTP segment is replayed and backwarded before the
  // decoder segment that makes the bridge; the decoder's replay installs a new leaf, and the
  // gradient the MTP backward left on the old one is looked up in chunk_state.mhc_multistream,
  // which the replayed last MTP post-process cleared.
  const Recipe recipe = WithMhc(3, 1)
                            .Set("train.iterations", int64_t{2})
                            .Set("precision.recipe", "fp32")
                            .ParityArms(testing::FullRecompute("uniform", 1))
                            .Build("mhc_bridge.toml");
  testing::ThreadTrainOptions options;
  options.bugs.overlap.mhc_bridge_from_chunk_state = true;
  const testing::RankRecords reference = testing::TrainOnThreads(recipe, "reference");
  const testing::RankRecords buggy = testing::TrainOnThreads(recipe, "overlap", options);
  const std::string difference = testing::FirstDifference(reference, buggy);
  ASSERT_NE(difference, "");
  const std::vector<std::string> differing = testing::DifferingGrads(reference, buggy, 1, 0);
  std::string names;
  for (const std::string& name : differing) names += (names.empty() ? "" : ", ") + name;
  std::printf(
      "mHC bridge from the cleared chunk state: %zu parameters differ at iteration 1 on "
      "rank 0: %s\n",
      differing.size(), names.c_str());
  // The loss of iteration 1 is the first pass's; only the gradients show it.
  for (const char* loss : {"iteration 1, rank 0: loss", "iteration 1, rank 0: lm_loss",
                           "iteration 1, rank 0: mtp_loss"}) {
    EXPECT_EQ(difference.find(loss), std::string::npos) << difference;
  }
  // The MTP depth's own parameters are right: what it lost is the gradient it sends down the
  // bridge, so every decoder parameter below the bridge is wrong.
  for (const std::string& name : differing) {
    EXPECT_NE(name.rfind("mtp.", 0), 0u) << name << " should not be affected";
  }
  for (const char* name : {"layers.2.mlp.mhc.mapping", "layers.0.attention.qkv", "embedding"}) {
    EXPECT_NE(std::find(differing.begin(), differing.end(), name), differing.end()) << name;
  }
  // Without recompute there is no replay, and the same switch changes nothing.
  const Recipe eager = WithMhc(3, 1)
                           .Set("train.iterations", int64_t{2})
                           .Set("precision.recipe", "fp32")
                           .ParityArms("recompute = { granularity = \"none\" }")
                           .Build("mhc_bridge_eager.toml");
  EXPECT_EQ(testing::FirstDifference(testing::TrainOnThreads(eager, "reference"),
                                     testing::TrainOnThreads(eager, "overlap", options)),
            "");
}

}  // namespace
}  // namespace bitparity

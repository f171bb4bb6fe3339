// The overlap arm with pipeline parallelism: pp x ep rank threads running the interleaved
// combined 1F1B (the forward of one model chunk and microbatch merged with the backward of
// another, point-to-point transfers between stages) give losses and every parameter gradient
// bit-identical to the reference arm's interleaved 1F1B with the same recompute settings, and to
// the reference without recompute, over pp {2, 4}, vpp {2, 3}, MTP {0, 1}, every recompute
// method, uneven layouts with empty, MTP-only and loss-only stages, both dispatchers and fp32 /
// bf16. The full cross product runs from recipes/matrix_pipeline.toml (ci/gate).

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/recipe.h"
#include "overlap_impl/overlap_engine.h"
#include "tests/support/recipe_builder.h"
#include "tests/support/thread_trainer.h"

namespace bitparity {
namespace {

struct PipelineParityCase {
  std::string name;
  int pp;
  int vpp;
  int layers;
  int mtp_layers;
  std::string layout;     // "": the even split
  std::string recompute;  // an arm override, "" for none
  std::string dispatcher;
  std::string precision;
};

Recipe Build(const PipelineParityCase& c) {
  testing::RecipeBuilder builder(c.layers, c.mtp_layers);
  builder.Set("parallel.pp", static_cast<int64_t>(c.pp))
      .Set("train.global_batch", int64_t{16})  // 4 microbatches per pipeline
      .Set("train.lr", 1e-2)
      .Set("model.dispatcher", c.dispatcher)
      .Set("precision.recipe", c.precision)
      .ParityArms(c.recompute);
  if (c.layout.empty()) {
    builder.Set("parallel.vpp", static_cast<int64_t>(c.vpp));
  } else {
    builder.Set("model.pipeline_layout", c.layout);
  }
  return builder.Build(c.name + ".toml");
}

class PipelineOverlapParityTest : public ::testing::TestWithParam<PipelineParityCase> {};

TEST_P(PipelineOverlapParityTest, BitwiseEqualToTheReferenceArm) {
  const Recipe recipe = Build(GetParam());
  ASSERT_EQ(recipe.parallel.vpp, GetParam().vpp);
  const testing::RankRecords overlap = testing::ExpectOverlapEqualsReferences(recipe);
  ASSERT_EQ(overlap.records.size(), static_cast<size_t>(GetParam().pp * 2));
}

INSTANTIATE_TEST_SUITE_P(
    Configurations, PipelineOverlapParityTest,
    ::testing::Values(
        PipelineParityCase{"pp2_vpp2_none_fp32", 2, 2, 4, 0, "", "", "alltoall", "fp32"},
        PipelineParityCase{"pp2_vpp2_uniform1_mtp1_flex_bf16", 2, 2, 4, 1, "",
                           testing::FullRecompute("uniform", 1), "flex", "bf16"},
        PipelineParityCase{"pp2_vpp2_uniform2_fp32", 2, 2, 4, 0, "",
                           testing::FullRecompute("uniform", 2), "flex", "fp32"},
        PipelineParityCase{"pp2_vpp2_block1_mtp1_bf16", 2, 2, 4, 1, "",
                           testing::FullRecompute("block", 1), "alltoall", "bf16"},
        // Uneven, an empty stage, MTP on the loss stage; block 3 is every layer of a chunk.
        PipelineParityCase{"pp2_vpp2_uneven_block3_mtp1_fp32", 2, 2, 4, 1, "Et|tt||tmL",
                           testing::FullRecompute("block", 3), "alltoall", "fp32"},
        // Three chunks per rank, chunks of different layer counts merged in one step.
        PipelineParityCase{"pp2_vpp3_uniform1_bf16", 2, 3, 4, 0, "Et|t|t||t|L",
                           testing::FullRecompute("uniform", 1), "alltoall", "bf16"},
        // An MTP-only stage and a loss-only stage, on four pipeline ranks.
        PipelineParityCase{"pp4_vpp2_mtp_only_and_loss_only_uniform1_bf16", 4, 2, 4, 1,
                           "Et|t|t|t|||m|L", testing::FullRecompute("uniform", 1), "flex", "bf16"}),
    [](const ::testing::TestParamInfo<PipelineParityCase>& info) { return info.param.name; });

// The comparison sees one ulp of one gradient element on one rank of a later stage.
TEST(PipelineOverlapParity, OneUlpOnOneRankOfTheLastStageIsNamed) {
  const Recipe recipe =
      Build({"ulp", 2, 2, 4, 1, "", testing::FullRecompute("uniform", 1), "alltoall", "bf16"});
  testing::ThreadTrainOptions options;
  options.on_trainer = [](int64_t rank, Trainer& trainer) {
    GradPerturbation p;
    p.rank = 3;  // pipeline rank 1, EP rank 1: layers 1 and 3, MTP and the head
    p.iteration = 2;
    p.param = "layers.3.attention.qkv";
    p.element = 17;
    if (rank == 3) trainer.set_perturbation(p);
  };
  const testing::RankRecords reference = testing::TrainOnThreads(recipe, "reference");
  const testing::RankRecords perturbed = testing::TrainOnThreads(recipe, "overlap", options);
  EXPECT_EQ(testing::DifferingGrads(reference, perturbed, 1, 3), std::vector<std::string>{});
  EXPECT_EQ(testing::DifferingGrads(reference, perturbed, 2, 3),
            std::vector<std::string>{"layers.3.attention.qkv"});
  EXPECT_NE(testing::FirstDifference(reference, perturbed).find("iteration 2, rank 3"),
            std::string::npos)
      << testing::FirstDifference(reference, perturbed);
}

// The seed's bug in a pipeline: with the MTP post-process left outside the recompute scope the
// decoder's gradient through the MTP branch is lost on the last stage, and the loss of it
// reaches every earlier stage through the gradients they receive.
TEST(PipelineOverlapParity, MtpPostProcessOutsideTheSegmentIsCaughtAcrossStages) {
  const Recipe recipe =
      Build({"mtp_bug", 2, 2, 4, 1, "", testing::FullRecompute("uniform", 1), "alltoall", "fp32"});
  testing::ThreadTrainOptions options;
  options.bugs.overlap.mtp_post_outside_segment = true;
  const testing::RankRecords reference = testing::TrainOnThreads(recipe, "reference");
  const testing::RankRecords buggy = testing::TrainOnThreads(recipe, "overlap", options);
  // Rank 0 holds the embedding and layers 0 and 2; rank 2 layers 1 and 3 with MTP: both see it.
  for (int64_t rank : {0, 2}) {
    EXPECT_FALSE(testing::DifferingGrads(reference, buggy, 1, rank).empty()) << "rank " << rank;
  }
}

// The combined steps of a pipeline rank pair the forward of one (chunk, microbatch) with the
// backward of another; every pass's receive is posted before its first consumer, and its send
// follows its last layer.
TEST(PipelineOverlapPlan, EveryPassReceivesBeforeItRunsAndSendsAfterIt) {
  const Recipe recipe =
      Build({"plan", 2, 2, 4, 1, "", testing::FullRecompute("uniform", 1), "alltoall", "bf16"});
  const PipelineLayout pipeline = recipe.pipeline();
  for (int64_t rank = 0; rank < 2; ++rank) {
    const CombinedStepPlan plan =
        BuildCombinedStepPlan(recipe.model, pipeline, rank, 4, recipe.arm("overlap").recompute);
    ASSERT_EQ(plan.chunks.size(), 2u);
    for (const ChunkPlan& chunk : plan.chunks) {
      for (int64_t m = 0; m < 4; ++m) {
        std::vector<size_t> recv_forward, first_forward, send_forward, last_forward;
        std::vector<size_t> recv_backward, first_backward, send_backward;
        for (size_t i = 0; i < plan.ops.size(); ++i) {
          const NodeOp& op = plan.ops[i];
          if (op.chunk != chunk.stage.chunk || op.microbatch != m) continue;
          const bool f = op.phase == Phase::kForward;
          if (op.node == NodeKind::kP2pRecv) (f ? recv_forward : recv_backward).push_back(i);
          if (op.node == NodeKind::kP2pSend) (f ? send_forward : send_backward).push_back(i);
          if (op.layer >= 0 && f) {
            if (first_forward.empty()) first_forward.push_back(i);
            last_forward = {i};
          }
          if (op.layer >= 0 && op.phase == Phase::kBackward && first_backward.empty()) {
            first_backward.push_back(i);
          }
        }
        const std::string pass = "rank " + std::to_string(rank) + " chunk " +
                                 std::to_string(chunk.stage.chunk) + " mb " + std::to_string(m);
        EXPECT_EQ(recv_forward.size(), chunk.receives() ? 1u : 0u) << pass;
        EXPECT_EQ(send_backward.size(), chunk.receives() ? 1u : 0u) << pass;
        EXPECT_EQ(recv_backward.size(), chunk.sends() ? 1u : 0u) << pass;
        EXPECT_EQ(send_forward.size(), chunk.sends() ? 1u : 0u) << pass;
        if (chunk.receives() && !first_forward.empty()) {
          EXPECT_LT(recv_forward[0], first_forward[0]) << pass;
        }
        if (chunk.sends() && !first_backward.empty()) {
          EXPECT_LT(recv_backward[0], first_backward[0]) << pass;
          EXPECT_GT(send_forward[0], last_forward[0]) << pass;
        }
      }
    }
    // The steps are Megatron's interleaved order with the overlap's extra warm-up forward.
    PipelineScheduleConfig schedule;
    schedule.pp = 2;
    schedule.vpp = 2;
    schedule.microbatches = 4;
    schedule.ep_overlap = true;
    EXPECT_EQ(FormatPipelineSchedule(plan.steps),
              FormatPipelineSchedule(PipelineSchedule(schedule, rank)));
  }
}

}  // namespace
}  // namespace bitparity

// The overlap arm with pipeline parallelism: pp x ep rank threads running the interleaved
// combined 1F1B (the forward of one model chunk and microbatch merged with the backward of
// another, point-to-point transfers between stages) give losses and every parameter gradient
// bit-identical to the reference arm's interleaved 1F1B with the same recompute settings, and to
// the reference without recompute, over pp {2, 4}, vpp {2, 3}, MTP {0, 1}, every recompute
// method, uneven layouts with empty, MTP-only and loss-only stages, both dispatchers and fp32 /
// bf16. The full cross product runs from recipes/matrix_pipeline.toml (ci/gate).

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "config/recipe.h"
#include "overlap_impl/overlap_engine.h"
#include "schedule/pipeline_schedule.h"
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
  std::string overlap_recompute = "";  // the overlap arm's, when it differs (the reference arm
                                       // has no whole-chunk unit with a pipeline)
};

Recipe Build(const PipelineParityCase& c) {
  testing::RecipeBuilder builder(c.layers, c.mtp_layers);
  builder.Set("parallel.pp", static_cast<int64_t>(c.pp))
      .Set("train.global_batch", int64_t{16})  // 4 microbatches per pipeline
      .Set("train.lr", 1e-2)
      .Set("model.dispatcher", c.dispatcher)
      .Set("precision.recipe", c.precision);
  if (c.overlap_recompute.empty()) {
    builder.ParityArms(c.recompute);
  } else {
    builder.Arm("reference", "reference", c.recompute)
        .Arm("overlap", "overlap", c.overlap_recompute)
        .Arm("reference_none", "reference");
  }
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
        // Two layers per chunk: a segment of two layers.
        PipelineParityCase{"pp2_vpp2_uniform2_fp32", 2, 2, 8, 0, "",
                           testing::FullRecompute("uniform", 2), "flex", "fp32"},
        // The whole chunk replayed at once (against the reference with uniform 1 and without
        // recompute), chunks of two layers and MTP.
        PipelineParityCase{"pp2_vpp2_chunk_mtp1_bf16", 2, 2, 8, 1, "",
                           testing::FullRecompute("uniform", 1), "alltoall", "bf16",
                           "recompute = { granularity = \"full\", unit = \"chunk\" }"},
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
                           "Et|t|t|t|||m|L", testing::FullRecompute("uniform", 1), "flex", "bf16"},
        // MTP on pipeline rank 0's last chunk, beside the embedding of its first (Megatron's
        // validate_layer_layout allows it): the depth reads the rank's own embedding.
        PipelineParityCase{"pp2_vpp2_mtp_on_rank0_uniform1_bf16", 2, 2, 3, 1, "Et|t|tm|L",
                           testing::FullRecompute("uniform", 1), "alltoall", "bf16"},
        PipelineParityCase{"pp2_vpp2_mtp_only_on_rank0_block1_fp32", 2, 2, 2, 1, "Et|t|m|L",
                           testing::FullRecompute("block", 1), "flex", "fp32"}),
    [](const ::testing::TestParamInfo<PipelineParityCase>& info) { return info.param.name; });

// [parallel] microbatch_group_size (Megatron's microbatch_group_size_per_vp_stage) other than
// pp: both arms take the four microbatches through a chunk before the next chunk starts, and
// still agree bit for bit (their pipeline transfers stay in order: comm/pipeline_channel.h).
// pp 2, vpp 2, four microbatches per pipeline rank taken in one group of 4.
testing::RecipeBuilder GroupOfFour(int mtp_layers) {
  testing::RecipeBuilder builder(4, mtp_layers);
  builder.Set("parallel.pp", int64_t{2})
      .Set("parallel.vpp", int64_t{2})
      .Set("parallel.microbatch_group_size", int64_t{4})
      .Set("train.global_batch", int64_t{16});
  return builder;
}

TEST(PipelineOverlapParity, AMicrobatchGroupOtherThanPpReordersBothArmsAlike) {
  testing::RecipeBuilder builder = GroupOfFour(1);
  builder.Set("train.lr", 1e-2)
      .Set("precision.recipe", "bf16")
      .ParityArms(testing::FullRecompute("uniform", 1));
  const Recipe recipe = builder.Build("microbatch_group.toml");
  const PipelineLayout pipeline = recipe.pipeline();
  ASSERT_EQ(pipeline.microbatch_group, 4);
  for (bool overlap : {false, true}) {
    EXPECT_EQ(
        FormatPipelineSchedule(
            PipelineSchedule(
                PipelineScheduleConfig::Of(pipeline, recipe.microbatches_per_rank(), overlap), 0))
            .substr(0, 29),
        "F0.0 F0.1 F0.2 F0.3 F1.0 F1.1")
        << (overlap ? "overlap" : "reference");
  }
  testing::ExpectOverlapEqualsReferences(recipe);
}

// The pipeline transfers match by order, so a receive posted out of the sender's order takes
// another pass's tensor. With both kinds on one lane per pair of ranks (the injected fault
// pipeline_one_lane) at pp 2 and a group of 4, the reference arm's pp rank 0 posts the receive
// of B1.0's gradient where pp rank 1 has sent F1.3's activation first: the arm fails at that
// receive, naming the rank and both passes, before any number is computed from the wrong tensor.
// (The overlap arm's extra warm-up forward happens to keep this table's one-lane order.)
TEST(PipelineOverlapParity, AReceiveMatchedToTheWrongPassFailsNamingIt) {
  testing::RecipeBuilder builder = GroupOfFour(0);
  builder.ParityArms("");
  const Recipe recipe = builder.Build("one_lane.toml");
  testing::ThreadTrainOptions options;
  options.bugs.runtime.pipeline_one_lane = true;
  try {
    testing::TrainOnThreads(recipe, "reference", options);
    ADD_FAILURE() << "trained with receives matched out of order";
  } catch (const std::exception& e) {  // rank threads' InfrastructureErrors, joined
    EXPECT_NE(std::string(e.what()).find(
                  "pp rank 0: the pipeline receive posted for the gradient of stage 2's output "
                  "for microbatch 0 from pp rank 1 got the activation entering stage 2 for "
                  "microbatch 3: the two ranks post their transfers in different orders"),
              std::string::npos)
        << e.what();
  }
  // The same recipe with the lanes kept apart trains.
  testing::TrainOnThreads(recipe, "reference");
}

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
  // The first difference is at iteration 2: on rank 3's gradient, or on the global gradient
  // norm of an earlier rank when the one ulp reaches the norm's bits.
  const std::string first = testing::FirstDifference(reference, perturbed);
  EXPECT_TRUE(
      first.rfind("iteration 2, rank 3: main grad of layers.3.attention.qkv", 0) == 0 ||
      (first.rfind("iteration 2, rank ", 0) == 0 && first.find(": grad_norm") != std::string::npos))
      << first;
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
  // Rank 0 holds the embedding and layers 0 and 2; rank 2 layers 1 and 3 with MTP. The lost
  // contribution reaches the first stage's layers and the embedding through the gradients sent
  // back, two stages and one rank boundary away.
  auto differs = [&](int64_t rank, const std::string& param) {
    const std::vector<std::string> d = testing::DifferingGrads(reference, buggy, 1, rank);
    return std::find(d.begin(), d.end(), param) != d.end();
  };
  EXPECT_TRUE(differs(2, "layers.3.attention.qkv"));
  EXPECT_TRUE(differs(2, "layers.1.attention.qkv"));
  EXPECT_TRUE(differs(0, "layers.2.attention.qkv"));
  EXPECT_TRUE(differs(0, "layers.0.attention.qkv"));
  EXPECT_TRUE(differs(0, "embedding"));
}

// Pipeline transfers are on the overlap timeline next to the all-to-alls: every pass of a
// middle stage receives and sends in both directions.
TEST(PipelineOverlapTimeline, RecordsEveryTransfer) {
  const Recipe recipe =
      Build({"timeline", 2, 2, 4, 0, "", testing::FullRecompute("uniform", 1), "alltoall", "fp32"});
  std::mutex mutex;
  std::map<int64_t, std::map<std::string, int>> counts;  // rank -> "p2p_recv forward" -> n
  testing::ThreadTrainOptions options;
  options.on_trainer = [&](int64_t rank, Trainer& trainer) {
    auto* engine = dynamic_cast<OverlapEngine*>(&trainer.engine());
    ASSERT_NE(engine, nullptr);
    engine->set_record_timeline(true);
    trainer.RunIteration(1, nullptr);
    std::lock_guard<std::mutex> lock(mutex);
    for (const TimelineEvent& e : engine->timeline()) {
      if (e.node == NodeKind::kP2pRecv || e.node == NodeKind::kP2pSend) {
        EXPECT_TRUE(e.comm);
        // A receive is posted a step before its first consumer waits for it.
        if (e.node == NodeKind::kP2pRecv) {
          EXPECT_GT(e.wait_begin_ns, e.begin_ns);
        }
        EXPECT_GE(e.end_ns, e.wait_begin_ns);
        ++counts[rank][std::string(ToString(e.node)) + " " + ToString(e.phase)];
      }
    }
  };
  testing::TrainOnThreads(recipe, "overlap", options);
  // Rank 0 (pipeline rank 0) holds stages 0 and 2: stage 0 sends forward and receives gradients,
  // stage 2 does all four; 4 microbatches each.
  EXPECT_EQ(counts[0]["p2p_send forward"], 8);
  EXPECT_EQ(counts[0]["p2p_recv backward"], 8);
  EXPECT_EQ(counts[0]["p2p_recv forward"], 4);
  EXPECT_EQ(counts[0]["p2p_send backward"], 4);
  // Rank 2 (pipeline rank 1): stages 1 and 3, the loss stage sends nothing forward.
  EXPECT_EQ(counts[2]["p2p_recv forward"], 8);
  EXPECT_EQ(counts[2]["p2p_send backward"], 8);
  EXPECT_EQ(counts[2]["p2p_send forward"], 4);
  EXPECT_EQ(counts[2]["p2p_recv backward"], 4);
}

// The combined steps of a pipeline rank pair the forward of one (chunk, microbatch) with the
// backward of another; every pass's receive is posted before its first consumer, and its send
// follows its last layer.
TEST(PipelineOverlapPlan, EveryPassReceivesBeforeItRunsAndSendsAfterIt) {
  const Recipe recipe = Build(
      {"plan", 2, 2, 4, 1, "Et|tt||tmL", testing::FullRecompute("uniform", 1), "alltoall", "bf16"});
  const PipelineLayout pipeline = recipe.pipeline();
  for (int64_t rank = 0; rank < 2; ++rank) {
    const CombinedStepPlan plan =
        BuildCombinedStepPlan(recipe.model, pipeline, rank, 4, recipe.arm("overlap").recompute);
    ASSERT_EQ(plan.chunks.size(), 2u);
    for (const ChunkPlan& chunk : plan.chunks) {
      for (int64_t m = 0; m < 4; ++m) {
        // Positions in the plan of this pass's transfers and of its first and last forward and
        // backward operations (layers, pre- and post-process).
        std::vector<size_t> recv_forward, send_forward, recv_backward, send_backward;
        std::vector<size_t> forward_ops, backward_ops;
        for (size_t i = 0; i < plan.ops.size(); ++i) {
          const NodeOp& op = plan.ops[i];
          if (op.chunk != chunk.stage.chunk || op.microbatch != m) continue;
          const bool f = op.phase == Phase::kForward;
          const bool compute = op.layer >= 0 || op.node == NodeKind::kPreProcess ||
                               op.node == NodeKind::kPostProcess;
          if (op.node == NodeKind::kP2pRecv) (f ? recv_forward : recv_backward).push_back(i);
          if (op.node == NodeKind::kP2pSend) (f ? send_forward : send_backward).push_back(i);
          if (compute && f) forward_ops.push_back(i);
          if (compute && op.phase == Phase::kBackward) backward_ops.push_back(i);
        }
        const std::string pass = "rank " + std::to_string(rank) + " chunk " +
                                 std::to_string(chunk.stage.chunk) + " mb " + std::to_string(m);
        ASSERT_EQ(recv_forward.size(), chunk.receives() ? 1u : 0u) << pass;
        ASSERT_EQ(send_backward.size(), chunk.receives() ? 1u : 0u) << pass;
        ASSERT_EQ(recv_backward.size(), chunk.sends() ? 1u : 0u) << pass;
        ASSERT_EQ(send_forward.size(), chunk.sends() ? 1u : 0u) << pass;
        if (chunk.receives() && !forward_ops.empty()) {
          EXPECT_LT(recv_forward[0], forward_ops.front()) << pass;
        }
        if (chunk.receives() && !backward_ops.empty()) {
          EXPECT_GT(send_backward[0], backward_ops.back()) << pass;
        }
        if (chunk.sends()) {
          if (!backward_ops.empty()) {
            EXPECT_LT(recv_backward[0], backward_ops.front()) << pass;
          }
          if (!forward_ops.empty()) {
            EXPECT_GT(send_forward[0], forward_ops.back()) << pass;
          }
          // The gradient comes back only after the activation went out.
          EXPECT_GT(recv_backward[0], send_forward[0]) << pass;
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

// A step merging chunks of different layer counts (Megatron's TransformerModelChunkSchedulePlan
// .run): the pairs first, forward layer i with backward layer Lb-1-i, then the backward's
// remaining layers, then the forward's. Rank 1 of "Et|tt||tmL" holds [t1 t2] and [t3 m0 L].
TEST(PipelineOverlapPlan, ChunksOfDifferentLengthsPairThenFinishBackwardThenForward) {
  const Recipe recipe = Build({"lengths", 2, 2, 4, 1, "Et|tt||tmL", "", "alltoall", "bf16"});
  const CombinedStepPlan plan =
      BuildCombinedStepPlan(recipe.model, recipe.pipeline(), 1, 4, recipe.arm("overlap").recompute);
  int checked = 0;
  for (const PipelineStep& step : plan.steps) {
    if (!step.forward.valid() || !step.backward.valid()) continue;
    if (step.forward.chunk == step.backward.chunk) continue;
    // The layer order of this step's attn nodes: "F1", "B1" (layer within the chunk).
    std::vector<std::string> order;
    for (const NodeOp& op : plan.ops) {
      const bool forward_pass = op.chunk == step.forward.chunk &&
                                op.microbatch == step.forward.microbatch &&
                                op.phase == Phase::kForward;
      const bool backward_pass = op.chunk == step.backward.chunk &&
                                 op.microbatch == step.backward.microbatch &&
                                 op.phase == Phase::kBackward;
      if (op.node != NodeKind::kAttn || !(forward_pass || backward_pass)) continue;
      order.push_back((forward_pass ? "F" : "B") + std::to_string(op.layer));
    }
    const int64_t lf = plan.chunk(step.forward.chunk).layers();
    const int64_t lb = plan.chunk(step.backward.chunk).layers();
    std::vector<std::string> expected;
    for (int64_t i = 0; i < std::min(lf, lb); ++i) {
      expected.push_back("F" + std::to_string(i));
      expected.push_back("B" + std::to_string(lb - 1 - i));
    }
    for (int64_t i = std::min(lf, lb); i < lb; ++i)
      expected.push_back("B" + std::to_string(lb - 1 - i));
    for (int64_t i = std::min(lf, lb); i < lf; ++i) expected.push_back("F" + std::to_string(i));
    EXPECT_EQ(order, expected) << FormatPipelineSchedule({step});
    ++checked;
  }
  EXPECT_GE(checked, 2);
}

}  // namespace
}  // namespace bitparity

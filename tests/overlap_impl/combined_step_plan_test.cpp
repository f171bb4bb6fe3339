// The overlap arm's schedule, as `bitparity plan` prints it: the combined 1F1B order over
// microbatches, Megatron's per-layer issue order inside a combined step (Megatron-LM's combined
// 1F1B, with the one documented change: dispatch forward before mlp backward), every all-to-all
// issued next to a compute node of the other microbatch, and the recompute segments' capture,
// node-by-node replay and release at the places the seed gives them.

#include "overlap_impl/combined_step_plan.h"

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "overlap_impl/faulty_plans.h"

namespace bitparity {
namespace {

ModelConfig Model(int64_t layers, int64_t mtp_layers) {
  ModelConfig m;
  m.layers = layers;
  m.first_k_dense = 1;
  m.mtp_layers = mtp_layers;
  return m;
}

RecomputeConfig Full(RecomputeMethod method, int64_t num_layers,
                     RecomputeUnit unit = RecomputeUnit::kSegment) {
  RecomputeConfig rc;
  rc.granularity = RecomputeGranularity::kFull;
  rc.method = method;
  rc.method_set = true;
  rc.num_layers = num_layers;
  rc.unit = unit;
  return rc;
}

// "F1 attn 0", "B0 moe_dispatch 2 comm", "B0 segment[2] replay", "B0 attn 2 replay", ...
std::string Describe(const NodeOp& op) {
  const bool backward_side = op.phase == Phase::kBackward || op.phase == Phase::kReplay ||
                             op.phase == Phase::kReplayDone || op.phase == Phase::kRelease ||
                             op.phase == Phase::kFlushGrads;
  std::string out =
      (backward_side ? "B" : "F") + std::to_string(op.microbatch) + " " + ToString(op.node);
  if (op.node == NodeKind::kSegment) out += "[" + std::to_string(op.segment) + "]";
  if (op.layer >= 0 && op.node != NodeKind::kSegment) out += " " + std::to_string(op.layer);
  if (op.phase != Phase::kForward && op.phase != Phase::kBackward) {
    out += std::string(" ") + ToString(op.phase);
  }
  if (op.stream == Stream::kComm) out += " comm";
  return out;
}

// The operations from the first `pre_process forward` of microbatch `f` up to (excluding) the
// next microbatch's: one combined step.
std::vector<std::string> CombinedStep(const CombinedStepPlan& plan, int64_t f) {
  std::vector<std::string> out;
  bool inside = false;
  for (const NodeOp& op : plan.ops) {
    const bool pre_forward = op.node == NodeKind::kPreProcess && op.phase == Phase::kForward;
    if (pre_forward && op.microbatch == f) inside = true;
    if (pre_forward && op.microbatch == f + 1) break;
    if (inside) out.push_back(Describe(op));
  }
  return out;
}

TEST(CombinedStepPlan, CombinedStepFollowsMegatronsPerLayerIssueOrder) {
  // Layer 0 dense, layer 1 MoE, layer 2 the MTP depth (MoE); uniform 1: one segment per layer.
  CombinedStepPlan plan = BuildCombinedStepPlan(Model(2, 1), 3, Full(RecomputeMethod::kUniform, 1));
  const std::vector<std::string> expected = {
      "F1 pre_process",
      "B0 post_process",  // the post-process backward before any layer backward
      // forward layer 0 of mb 1 with backward layer 2 (MTP) of mb 0
      "B0 segment[2] replay",  // step 1: the tail's segment replays first, its A2As exposed
      "B0 attn 2 replay", "B0 moe_dispatch 2 replay comm", "B0 mlp 2 replay",
      "B0 moe_combine 2 replay comm", "B0 moe_combine_epilogue 2 replay",
      "B0 mtp_post_process 2 replay", "B0 segment[2] replay_done",
      "B0 mtp_post_process 2",   // step 2
      "B0 moe_combine 2 comm",   // step 5   | under
      "F1 segment[0] capture",   // step 6
      "F1 attn 0",               //          | attn forward of the other microbatch
      "F1 moe_dispatch 0",       // step 8 (dense: a null node, no stream)
      "B0 mlp 2",                // step 7 (issued after step 8 in Megatron's CPU order)
      "B0 moe_dispatch 2 comm",  // step 9   | under
      "F1 mlp 0",                // step 11  | mlp forward
      "F1 moe_combine 0",        // step 12 (dense: compute)
      "B0 attn 2",               // step 14
      "B0 segment[2] release",   // step 17
      // forward layer 1 with backward layer 1
      "B0 segment[1] replay", "B0 attn 1 replay", "B0 moe_dispatch 1 replay comm",
      "B0 mlp 1 replay", "B0 moe_combine 1 replay comm", "B0 moe_combine_epilogue 1 replay",
      "B0 segment[1] replay_done",
      "B0 moe_combine 1 comm",      //          | under
      "F1 moe_combine_epilogue 0",  // layer 0's output, right before its first consumer
      "F1 segment[1] capture",
      "F1 attn 1",               //          | attn forward
      "F1 moe_dispatch 1 comm",  // step 8   | under
      "B0 mlp 1",                //          | mlp backward
      "B0 moe_dispatch 1 comm",  //          | under
      "F1 mlp 1",                //          | mlp forward
      "F1 moe_combine 1 comm",   //          | under
      "B0 attn 1",               //          | attn backward
      "B0 segment[1] release",
      // forward layer 2 (MTP) with backward layer 0
      "B0 segment[0] replay", "B0 attn 0 replay", "B0 moe_dispatch 0 replay", "B0 mlp 0 replay",
      "B0 moe_combine 0 replay", "B0 moe_combine_epilogue 0 replay", "B0 segment[0] replay_done",
      "B0 moe_combine 0",  // dense: compute
      "F1 moe_combine_epilogue 1", "F1 segment[2] capture", "F1 attn 2", "F1 moe_dispatch 2 comm",
      "B0 mlp 0",
      "B0 moe_dispatch 0",  // dense: a null node
      "F1 mlp 2", "F1 moe_combine 2 comm", "B0 attn 0", "F1 moe_combine_epilogue 2",
      "F1 mtp_post_process 2",  // step 15
      "B0 segment[0] release",
      // the chunk's end
      "F1 post_process", "B0 pre_process", "B0 chunk flush_grads", "F1 chunk release_activations"};
  EXPECT_EQ(CombinedStep(plan, 1), expected);
}

struct PlanCase {
  std::string name;
  int64_t layers;
  int64_t mtp;
  int64_t microbatches;
  RecomputeConfig recompute;
};

void PrintTo(const PlanCase& c, std::ostream* out) { *out << c.name; }

class PlanInvariantsTest : public ::testing::TestWithParam<PlanCase> {};

TEST_P(PlanInvariantsTest, MicrobatchOrderLayerPairingOverlapAndSegments) {
  const PlanCase& c = GetParam();
  CombinedStepPlan plan =
      BuildCombinedStepPlan(Model(c.layers, c.mtp), c.microbatches, c.recompute);
  const int64_t L = plan.chunk(0).layers();
  const std::vector<NodeOp>& ops = plan.ops;

  // F0, (F1 | B0), ..., (F(M-1) | B(M-2)), B(M-1): the k-th pre-process forward is microbatch k,
  // the k-th post-process backward microbatch k, and B(k) starts after F(k+1) started.
  std::vector<int64_t> forwards, backwards;
  std::vector<size_t> forward_at, backward_at;
  for (size_t i = 0; i < ops.size(); ++i) {
    if (ops[i].node == NodeKind::kPreProcess && ops[i].phase == Phase::kForward) {
      forwards.push_back(ops[i].microbatch);
      forward_at.push_back(i);
    }
    if (ops[i].node == NodeKind::kPostProcess && ops[i].phase == Phase::kBackward) {
      backwards.push_back(ops[i].microbatch);
      backward_at.push_back(i);
    }
  }
  ASSERT_EQ(forwards.size(), static_cast<size_t>(c.microbatches));
  ASSERT_EQ(backwards.size(), static_cast<size_t>(c.microbatches));
  for (int64_t k = 0; k < c.microbatches; ++k) {
    EXPECT_EQ(forwards[k], k);
    EXPECT_EQ(backwards[k], k);
    if (k + 1 < c.microbatches) {
      EXPECT_LT(forward_at[k + 1], backward_at[k]) << "B" << k << " before F" << k + 1;
      // The post-process backward of B(k) is the first operation after F(k+1)'s pre-process.
      EXPECT_EQ(backward_at[k], forward_at[k + 1] + 1);
    }
  }

  // Inside each combined step, the j-th layer forward (attn) is paired with backward layer
  // L-1-j, and every all-to-all outside a replay is followed by a compute node of the other
  // microbatch, which it runs under.
  for (int64_t k = 1; k < c.microbatches; ++k) {
    const size_t begin = forward_at[k];
    // The step ends where the next one starts: F(k+1)'s pre-process, or B(M-1) alone.
    const size_t end = k + 1 < c.microbatches ? forward_at[k + 1] : backward_at[c.microbatches - 1];
    std::vector<int64_t> f_layers, b_layers;
    for (size_t i = begin; i < end; ++i) {
      const NodeOp& op = ops[i];
      if (op.node == NodeKind::kAttn && op.phase == Phase::kForward) f_layers.push_back(op.layer);
      if (op.node == NodeKind::kAttn && op.phase == Phase::kBackward) b_layers.push_back(op.layer);
      if (op.stream != Stream::kComm || op.phase == Phase::kReplay) continue;
      size_t next = i + 1;
      while (next < end && ops[next].stream != Stream::kCompute) ++next;
      ASSERT_LT(next, end) << Describe(op) << " is the last operation of its step";
      EXPECT_NE(ops[next].microbatch, op.microbatch)
          << Describe(op) << " is followed by " << Describe(ops[next]) << " of its own microbatch";
    }
    ASSERT_EQ(f_layers.size(), static_cast<size_t>(L));
    ASSERT_EQ(b_layers.size(), static_cast<size_t>(L));
    for (int64_t j = 0; j < L; ++j) {
      EXPECT_EQ(f_layers[j], j);
      EXPECT_EQ(b_layers[j], L - 1 - j);
    }
  }

  // Segments: per microbatch, one capture right before the head's attn forward, one replay as
  // the first operation of the tail layer's backward that replays exactly the segment's layers in
  // order, and one release right after the head layer's attn backward.
  const RecomputePlan& r = plan.chunk(0).recompute;
  for (int64_t m = 0; m < c.microbatches; ++m) {
    for (size_t s = 0; s < r.segments.size(); ++s) {
      const LayerSegment& seg = r.segments[s];
      std::map<Phase, std::vector<size_t>> at;
      for (size_t i = 0; i < ops.size(); ++i) {
        if (ops[i].node == NodeKind::kSegment && ops[i].microbatch == m &&
            ops[i].segment == static_cast<int64_t>(s)) {
          at[ops[i].phase].push_back(i);
        }
      }
      ASSERT_EQ(at[Phase::kCapture].size(), 1u);
      ASSERT_EQ(at[Phase::kReplay].size(), 1u);
      ASSERT_EQ(at[Phase::kReplayDone].size(), 1u);
      ASSERT_EQ(at[Phase::kRelease].size(), 1u);
      const NodeOp& after_capture = ops[at[Phase::kCapture][0] + 1];
      EXPECT_EQ(after_capture.node, NodeKind::kAttn);
      EXPECT_EQ(after_capture.phase, Phase::kForward);
      EXPECT_EQ(after_capture.layer, seg.first_layer);
      EXPECT_EQ(after_capture.microbatch, m);
      // No backward of the tail layer (of this microbatch) before the replay.
      for (size_t i = 0; i < at[Phase::kReplay][0]; ++i) {
        EXPECT_FALSE(ops[i].microbatch == m && ops[i].phase == Phase::kBackward &&
                     ops[i].layer == seg.last_layer())
            << Describe(ops[i]) << " before the replay of segment " << s;
      }
      std::vector<int64_t> replayed;
      for (size_t i = at[Phase::kReplay][0] + 1; i < at[Phase::kReplayDone][0]; ++i) {
        EXPECT_EQ(ops[i].phase, Phase::kReplay) << Describe(ops[i]);
        EXPECT_EQ(ops[i].microbatch, m);
        if (ops[i].node == NodeKind::kAttn) replayed.push_back(ops[i].layer);
      }
      std::vector<int64_t> layers;
      for (int64_t l = seg.first_layer; l <= seg.last_layer(); ++l) layers.push_back(l);
      EXPECT_EQ(replayed, layers);
      const NodeOp& before_release = ops[at[Phase::kRelease][0] - 1];
      EXPECT_TRUE(before_release.node == NodeKind::kAttn ||
                  before_release.node == NodeKind::kMtpPostProcess)
          << Describe(before_release);
      // The head layer's attn backward precedes the release, with nothing of the head after it.
      for (size_t i = at[Phase::kRelease][0] + 1; i < ops.size(); ++i) {
        EXPECT_FALSE(ops[i].microbatch == m && ops[i].layer == seg.first_layer &&
                     ops[i].node != NodeKind::kSegment)
            << Describe(ops[i]) << " after segment " << s << " was released";
      }
    }
  }
  // Without segments nothing is captured, replayed or released.
  if (r.segments.empty()) {
    for (const NodeOp& op : ops) EXPECT_NE(op.node, NodeKind::kSegment) << Describe(op);
  }
}

RecomputeConfig NoRecompute() { return RecomputeConfig{}; }

INSTANTIATE_TEST_SUITE_P(
    Configurations, PlanInvariantsTest,
    ::testing::Values(PlanCase{"none_mtp1", 3, 1, 4, NoRecompute()},
                      PlanCase{"uniform1_mtp1", 3, 1, 4, Full(RecomputeMethod::kUniform, 1)},
                      PlanCase{"uniform2_ragged", 3, 0, 3, Full(RecomputeMethod::kUniform, 2)},
                      PlanCase{"uniform4_of_6", 6, 0, 2, Full(RecomputeMethod::kUniform, 4)},
                      PlanCase{"block1_mtp1", 3, 1, 3, Full(RecomputeMethod::kBlock, 1)},
                      PlanCase{"block3_mtp1", 3, 1, 3, Full(RecomputeMethod::kBlock, 3)},
                      PlanCase{"chunk_mtp1", 3, 1, 3,
                               Full(RecomputeMethod::kUniform, 1, RecomputeUnit::kChunk)},
                      PlanCase{"one_microbatch", 2, 0, 1, Full(RecomputeMethod::kUniform, 1)}),
    [](const ::testing::TestParamInfo<PlanCase>& info) { return info.param.name; });

// The faulty plans change the schedule where their bug lives and nowhere else.
TEST(FaultyPlans, EachScheduleBugIsADifferentPlan) {
  const CombinedStepPlan plan =
      BuildCombinedStepPlan(Model(3, 1), 3, Full(RecomputeMethod::kUniform, 1));
  EXPECT_TRUE(plan.mtp_post_process_in_segment);
  for (bool restores : plan.replay_restores) EXPECT_TRUE(restores);
  auto count = [](const CombinedStepPlan& p, NodeKind node, Phase phase) {
    int64_t n = 0;
    for (const NodeOp& op : p.ops) n += op.node == node && op.phase == phase;
    return n;
  };
  const int64_t backward_ops = [&] {
    int64_t n = 0;
    for (const NodeOp& op : plan.ops) n += op.phase == Phase::kBackward;
    return n;
  }();
  ASSERT_GT(count(plan, NodeKind::kMtpPostProcess, Phase::kReplay), 0);

  OverlapBugs none;
  EXPECT_EQ(WithScheduleBugs(plan, none).ops.size(), plan.ops.size());

  OverlapBugs outside;
  outside.mtp_post_outside_segment = true;
  const CombinedStepPlan no_mtp_replay = WithScheduleBugs(plan, outside);
  EXPECT_FALSE(no_mtp_replay.mtp_post_process_in_segment);
  EXPECT_EQ(count(no_mtp_replay, NodeKind::kMtpPostProcess, Phase::kReplay), 0);
  EXPECT_EQ(no_mtp_replay.ops.size(),
            plan.ops.size() - count(plan, NodeKind::kMtpPostProcess, Phase::kReplay));

  OverlapBugs flush;
  flush.flush_per_backward_call = true;
  const CombinedStepPlan flushing = WithScheduleBugs(plan, flush);
  EXPECT_EQ(count(flushing, NodeKind::kChunk, Phase::kFlushGrads),
            count(plan, NodeKind::kChunk, Phase::kFlushGrads) + backward_ops);
  for (size_t i = 0; i < flushing.ops.size(); ++i) {
    if (flushing.ops[i].phase != Phase::kBackward) continue;
    ASSERT_LT(i + 1, flushing.ops.size());
    EXPECT_EQ(flushing.ops[i + 1].phase, Phase::kFlushGrads) << "after operation " << i;
  }

  OverlapBugs snapshot;
  snapshot.skip_snapshot_restore = true;
  const CombinedStepPlan no_restore = WithScheduleBugs(plan, snapshot);
  for (bool restores : no_restore.replay_restores) EXPECT_FALSE(restores);
  EXPECT_EQ(no_restore.ops.size(), plan.ops.size());
  OverlapBugs one_field;
  one_field.snapshot_skips[Index(ChunkStateField::kPaddingMask)] = true;
  const CombinedStepPlan skips_mask = WithScheduleBugs(plan, one_field);
  for (ChunkStateField field : kChunkStateFields) {
    EXPECT_EQ(skips_mask.replay_restores[Index(field)], field != ChunkStateField::kPaddingMask)
        << ToString(field);
  }
}

}  // namespace
}  // namespace bitparity

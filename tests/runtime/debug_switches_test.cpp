// The developer switches are parsed in one place; each names what is wrong with a bad value.

#include "runtime/debug_switches.h"

#include <gtest/gtest.h>

#include "core/errors.h"

namespace bitparity {
namespace {

// The InputError message `parse` throws, or "" when it throws none.
template <typename Parse>
std::string InputErrorOf(Parse parse) {
  try {
    parse();
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(DebugSwitches, InjectedBugsSplitIntoTheModelsAndTheOverlapArmsShare) {
  EXPECT_FALSE(ParseInjectedBugs("").any());
  const InjectedBugs bugs = ParseInjectedBugs("composite_rms_norm,flush_per_backward_call");
  EXPECT_TRUE(bugs.model.composite_rms_norm);
  EXPECT_FALSE(bugs.model.aux_loss_in_objective);
  EXPECT_TRUE(bugs.overlap.flush_per_backward_call);
  EXPECT_FALSE(bugs.overlap.stale_routing_metadata);
  EXPECT_TRUE(ParseInjectedBugs("stale_routing_metadata").overlap.any());
  EXPECT_FALSE(ParseInjectedBugs("stale_routing_metadata").model.any());
  const std::string unknown = InputErrorOf([] { ParseInjectedBugs("composite_rms_norm,x1"); });
  EXPECT_NE(unknown.find("BITPARITY_INJECT_BUG: unknown bug 'x1'"), std::string::npos) << unknown;
}

TEST(DebugSwitches, FaultAndPerturbationNameTheirVariable) {
  EXPECT_EQ(ParseFaultPlan("").kind, FaultKind::kNone);
  const FaultPlan plan = ParseFaultPlan("hang,rank=all,iteration=3");
  EXPECT_EQ(plan.kind, FaultKind::kHang);
  EXPECT_EQ(plan.rank, FaultPlan::kEveryRank);
  EXPECT_EQ(plan.iteration, 3);
  const std::string bad_rank = InputErrorOf([] { ParseFaultPlan("hang,rank=x"); });
  EXPECT_NE(bad_rank.find("BITPARITY_FAULT: rank must be an integer, got 'x'"), std::string::npos)
      << bad_rank;
  const GradPerturbation p = ParseGradPerturbation("rank=1,iteration=2,param=head,element=7");
  EXPECT_EQ(p.param, "head");
  EXPECT_EQ(p.element, 7);
  EXPECT_EQ(p.ulps, 1);
  const std::string no_param =
      InputErrorOf([] { ParseGradPerturbation("rank=1,iteration=2,element=7"); });
  EXPECT_NE(no_param.find("BITPARITY_PERTURB: 'param=' is required"), std::string::npos)
      << no_param;
}

// The torch-free list the launcher checks (comm/developer_switches.h) and the flags a rank sets
// are one set: every listed bug sets a flag of its own, and the flags number the names.
TEST(DebugSwitches, EveryInjectableBugSetsAFlagOfItsOwn) {
  const std::vector<std::string> names = InjectableBugNames();
  std::string all;
  for (const std::string& name : names) {
    EXPECT_TRUE(ParseInjectedBugs(name).any()) << name;
    all += (all.empty() ? "" : ",") + name;
  }
  const InjectedBugs every = ParseInjectedBugs(all);
  size_t flags = every.model.composite_rms_norm + every.model.aux_loss_in_objective;
  for (bool skip : every.overlap.snapshot_skips) flags += skip;
  const OverlapBugs& o = every.overlap;
  flags += o.stale_routing_metadata + o.skip_snapshot_restore + o.mtp_post_outside_segment +
           o.flush_per_backward_call + o.mhc_bridge_from_chunk_state + o.synchronous_all_to_all +
           o.segment_not_released;
  const RuntimeBugs& r = every.runtime;
  flags += r.thread_order_reduction + r.nondeterministic_kernel + r.pipeline_one_lane +
           r.checkpoint_drops_optimizer_steps + r.checkpoint_drops_lr_position +
           r.checkpoint_resets_data_position + r.checkpoint_masters_in_training_dtype;
  EXPECT_EQ(flags, names.size());
}

}  // namespace
}  // namespace bitparity

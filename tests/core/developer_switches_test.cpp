// A developer switch that cannot apply to the recipe is refused before any rank starts, naming
// the switch and why: it would do nothing, and the run would pass as if it had been tested.

#include "comm/developer_switches.h"

#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "core/errors.h"

namespace bitparity {
namespace {

std::string InputErrorOf(const std::function<void()>& check) {
  try {
    check();
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

struct SwitchCheckTest : ::testing::Test {
  SwitchCheckTest() {
    recipe.parallel.ep = 2;
    recipe.train.iterations = 4;
    target.recipe = &recipe;
    target.engines = {EngineKind::kReference, EngineKind::kOverlap};
  }
  Recipe recipe;
  SwitchTarget target;
};

TEST_F(SwitchCheckTest, RanksAndIterationsOutsideTheRunAreRefused) {
  EXPECT_EQ(InputErrorOf([&] { CheckFaultApplies(ParseFaultPlan("crash,rank=1"), target, "F"); }),
            "");
  EXPECT_EQ(InputErrorOf([&] {
              CheckFaultApplies(ParseFaultPlan("hang,rank=all,iteration=4"), target, "F");
            }),
            "");
  EXPECT_EQ(InputErrorOf([&] { CheckFaultApplies(ParseFaultPlan("crash,rank=7"), target, "F"); }),
            "F: rank 7 is outside the world of 2 rank(s) (0..1): the switch would do nothing");
  EXPECT_EQ(InputErrorOf([&] {
              CheckFaultApplies(ParseFaultPlan("error,rank=0,iteration=999"), target, "F");
            }),
            "F: iteration 999 is outside the run's iterations 1..4: the switch would do nothing");
  // A start-up fault has no iteration.
  EXPECT_EQ(InputErrorOf([&] {
              CheckFaultApplies(ParseFaultPlan("startup,rank=1,iteration=999"), target, "F");
            }),
            "");
  const GradPerturbation late = ParseGradPerturbation("rank=1,iteration=5,param=head,element=0");
  EXPECT_NE(InputErrorOf([&] {
              CheckPerturbationApplies(late, target, "P");
            }).find("P: iteration 5 is outside the run's iterations 1..4"),
            std::string::npos);
  const GradPerturbation far = ParseGradPerturbation("rank=2,iteration=1,param=head,element=0");
  EXPECT_NE(InputErrorOf([&] {
              CheckPerturbationApplies(far, target, "P");
            }).find("P: rank 2 is outside the world of 2"),
            std::string::npos);
  EXPECT_NE(InputErrorOf([] {
              ParseGradPerturbation("rank=0,iteration=1,param=h,element=-1");
            }).find("element must be >= 0"),
            std::string::npos);
  EXPECT_NE(InputErrorOf([] {
              ParseGradPerturbation("rank=0,iteration=1,param=h,element=1,ulps=0");
            }).find("ulps 0 changes nothing"),
            std::string::npos);
}

TEST_F(SwitchCheckTest, BugsWhoseCodePathTheRecipeNeverTakesAreRefused) {
  auto error = [&](const std::string& bugs) {
    return InputErrorOf([&] { CheckInjectedBugsApply(ParseInjectedBugNames(bugs), target); });
  };
  EXPECT_EQ(error("synchronous_all_to_all,composite_rms_norm,stale_routing_metadata"), "");
  EXPECT_NE(error("thread_order_reduction").find("one thread ([parallel] threads 1)"),
            std::string::npos);
  EXPECT_NE(error("mhc_bridge_from_chunk_state").find("does not use mHC"), std::string::npos);
  EXPECT_NE(error("snapshot_skips_mtp_hidden_states").find("no MTP depth"), std::string::npos);
  EXPECT_NE(error("pipeline_one_lane").find("no pipeline ([parallel] pp 1)"), std::string::npos);
  EXPECT_NE(error("checkpoint_drops_lr_position").find("no run saves a checkpoint"),
            std::string::npos);
  EXPECT_EQ(error("thread_order_reduction"),
            "BITPARITY_INJECT_BUG: thread_order_reduction cannot apply: the ranks run one thread "
            "([parallel] threads 1); the switch would do nothing");
  target.engines = {EngineKind::kReference};
  EXPECT_NE(error("segment_not_released").find("no arm of this run is an overlap arm"),
            std::string::npos);
  // What makes each apply.
  recipe.parallel.threads = 2;
  recipe.parallel.pp = 2;
  recipe.model.mhc_streams = 4;
  recipe.model.mtp_layers = 1;
  target.engines = {EngineKind::kOverlap};
  target.saves_checkpoints = true;
  EXPECT_EQ(error("thread_order_reduction,pipeline_one_lane,mhc_bridge_from_chunk_state,"
                  "snapshot_skips_mtp_hidden_states,checkpoint_drops_lr_position"),
            "");
  recipe.parallel.ep = 1;
  EXPECT_NE(error("synchronous_all_to_all").find("no all-to-all ([parallel] ep 1)"),
            std::string::npos);
  EXPECT_NE(error("no_such_bug").find("unknown bug 'no_such_bug' (known: stale_routing_metadata"),
            std::string::npos);
}

}  // namespace
}  // namespace bitparity

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

}  // namespace
}  // namespace bitparity

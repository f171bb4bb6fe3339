// The restart-replay check against synthetic traces: a resumed run that equals run 1 passes, and
// each piece of lost state fails it with its name; the plan of resumed runs and their checks.

#include "harness/restart_replay.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "config/recipe.h"
#include "harness/check_plan.h"
#include "harness/trace_compare.h"
#include "tests/support/recipe_builder.h"
#include "tests/support/trace_builder.h"
#include "trace/trace_keys.h"

namespace bitparity {
namespace {

// Run 1 of 4 iterations on 2 ranks, and a run resumed from its checkpoint after iteration 2 that
// restored its masters exactly.
struct Runs {
  Trace straight = testing::MakeTrace(2, 4);
  Trace resumed;

  Runs() {
    resumed = RecordsAfter(straight, 2);
    for (RankTrace& rank : resumed.ranks) {
      rank.attributes[trace_keys::kResumedAfterIteration] = "2";
      std::string digests;
      for (uint64_t d : straight.ranks[rank.rank].iterations[1].param_digests) {
        digests += (digests.empty() ? "" : ",") + HexDigest(d);
      }
      rank.attributes[trace_keys::kResumedParameterDigests] = digests;
    }
  }

  CheckResult Check() const {
    return CheckResumes("overlap", "overlap", straight, {{2, &resumed}});
  }
};

void ExpectFailureNaming(const CheckResult& result, const std::string& text) {
  EXPECT_EQ(result.verdict, Verdict::kFail);
  EXPECT_NE(result.summary.find(text), std::string::npos) << result.summary;
  EXPECT_EQ(result.summary.rfind("resumed after iteration 2: ", 0), 0u) << result.summary;
}

TEST(RestartReplay, ARunResumedWithEveryPieceOfStateIsRunOne) {
  const Runs runs;
  const CheckResult result = runs.Check();
  EXPECT_EQ(result.verdict, Verdict::kPass) << result.summary;
  EXPECT_EQ(result.name, "overlap resumes bit-identically");
  EXPECT_EQ(result.summary.rfind("bit-identical: ", 0), 0u) << result.summary;
  EXPECT_GT(result.compared_records, 0);
  ASSERT_EQ(runs.resumed.ranks[0].iterations.size(), 2u);
  EXPECT_EQ(runs.resumed.ranks[0].iterations[0].iteration, 3);
  EXPECT_TRUE(runs.resumed.ranks[0].grad_dumps.empty());  // run 1 dumped at iteration 2 only
}

TEST(RestartReplay, EachLostCounterIsNamed) {
  const std::vector<std::pair<int64_t IterationRecord::*, std::string>> counters = {
      {&IterationRecord::optimizer_steps,
       "optimizer_steps is 1, run 1's is 3: the resumed run "
       "lost the optimizer's step count"},
      {&IterationRecord::lr_steps,
       "lr_steps is 1, run 1's is 3: the resumed run lost the LR "
       "schedule's position"},
      {&IterationRecord::data_batches,
       "data_batches is 1, run 1's is 3: the resumed run lost "
       "the data position"},
  };
  for (const auto& [member, message] : counters) {
    Runs runs;
    runs.resumed.ranks[1].iterations[0].*member = 1;
    const CheckResult result = runs.Check();
    ExpectFailureNaming(result, "iteration 3, rank 1: " + message);
    ASSERT_TRUE(result.difference.has_value());
    EXPECT_EQ(result.difference->iteration, 3);
  }
}

TEST(RestartReplay, MastersRestoredInAnotherPrecisionAreNamed) {
  Runs runs;
  std::string& digests = runs.resumed.ranks[0].attributes[trace_keys::kResumedParameterDigests];
  digests = digests.substr(0, digests.find(',') + 1) + HexDigest(42);
  const CheckResult result = runs.Check();
  ExpectFailureNaming(result, "rank 0 restored the master of b with digest 0x000000000000002a");
  ExpectFailureNaming(result, "the checkpoint does not hold the fp32 masters bit for bit");
  EXPECT_EQ(result.difference->param, "b");
}

TEST(RestartReplay, AcrossArmsAMasterThatDiffersSaysTheArmsHadParted) {
  Runs runs;
  std::string& digests = runs.resumed.ranks[1].attributes[trace_keys::kResumedParameterDigests];
  digests = HexDigest(7) + digests.substr(digests.find(','));
  const CheckResult result =
      CheckResumes("overlap", "reference", runs.straight, {{2, &runs.resumed}});
  EXPECT_EQ(result.name, "overlap resumes bit-identically from reference");
  ExpectFailureNaming(result, "rank 1 restored the master of w with digest 0x0000000000000007");
  ExpectFailureNaming(result,
                      "reference's masters after iteration 2 are not overlap's: the arms had "
                      "parted by then (see overlap vs reference: parameters)");
  EXPECT_EQ(result.details.rfind("resumed after iteration 2: ", 0), 0u) << result.details;
}

TEST(RestartReplay, ARankThatRecordedNoRestoredMastersFails) {
  Runs runs;
  runs.resumed.ranks[0].attributes.erase(trace_keys::kResumedParameterDigests);
  ExpectFailureNaming(runs.Check(),
                      "rank 0 of the resumed run recorded no restored masters "
                      "(resumed_parameter_digests)");
}

TEST(RestartReplay, ARecordThatDiffersAfterTheResumeIsNamed) {
  Runs runs;
  runs.resumed.ranks[1].iterations[1].loss += 1.0f;
  const CheckResult result = runs.Check();
  ExpectFailureNaming(result, "first difference at iteration 4, rank 1");
}

TEST(RestartReplay, ARunThatDidNotResumeWhereAskedFails) {
  Runs runs;
  runs.resumed.ranks[0].attributes[trace_keys::kResumedAfterIteration] = "1";
  ExpectFailureNaming(runs.Check(), "rank 0 did not resume after iteration 2 (it says 1)");
  runs.resumed.ranks.pop_back();
  ExpectFailureNaming(runs.Check(), "the resumed run has 1 ranks, run 1 has 2");
}

Recipe TwoArmRecipe(bool across) {
  testing::RecipeBuilder builder(2, 0);
  builder.Batches(8, 4).SetList("train.checkpoint_at", {1, 3});
  if (across) builder.Set("train.resume_across_arms", true);
  return builder.Arm("reference", "reference").Arm("overlap", "overlap").Build();
}

TEST(RestartReplay, EveryArmResumesFromItsOwnCheckpointsThenFromTheBaselines) {
  const std::vector<std::string> arms = {"reference", "overlap"};
  std::vector<std::string> folders;
  for (const PlannedResume& r : PlanResumes(TwoArmRecipe(true), arms)) {
    folders.push_back(ResumeFolder(r));
  }
  EXPECT_EQ(folders,
            (std::vector<std::string>{
                "reference/resume_1", "reference/resume_3", "overlap/resume_1", "overlap/resume_3",
                "overlap/resume_1_from_reference", "overlap/resume_3_from_reference"}));
  EXPECT_EQ(PlanResumes(TwoArmRecipe(false), arms).size(), 4u);
  std::vector<std::string> names;
  for (const PlannedCheck& c : PlanChecks(TwoArmRecipe(true), arms, {})) {
    if (c.kind == CheckKind::kResumes) names.push_back(c.name + (c.skip_reason.empty() ? "" : "?"));
  }
  EXPECT_EQ(names, (std::vector<std::string>{"reference resumes bit-identically",
                                             "overlap resumes bit-identically",
                                             "overlap resumes bit-identically from reference"}));
  // Without the baseline in --arms, the cross-arm check is planned skipped, and nothing resumes
  // from a checkpoint that is not saved.
  for (const PlannedCheck& c : PlanChecks(TwoArmRecipe(true), {"overlap"}, {})) {
    if (c.kind == CheckKind::kResumes && c.other == "reference") {
      EXPECT_EQ(c.skip_reason, "arm 'reference' was not run (--arms)");
    }
  }
  EXPECT_EQ(PlanResumes(TwoArmRecipe(true), {"overlap"}).size(), 2u);
}

TEST(RestartReplay, AnArmOfAnotherPrecisionDoesNotResumeFromTheBaseline) {
  testing::RecipeBuilder builder(2, 0);
  builder.Batches(8, 4).SetList("train.checkpoint_at", {2}).Set("train.resume_across_arms", true);
  const Recipe recipe = builder.Arm("reference", "reference")
                            .Arm("overlap", "overlap", "precision = { recipe = \"fp32\" }")
                            .Build();
  const std::vector<std::string> arms = {"reference", "overlap"};
  EXPECT_EQ(PlanResumes(recipe, arms).size(), 2u);  // each arm from its own checkpoint only
  bool planned = false;
  for (const PlannedCheck& c : PlanChecks(recipe, arms, {})) {
    if (c.kind != CheckKind::kResumes || c.other != "reference" || c.arm != "overlap") continue;
    planned = true;
    EXPECT_EQ(c.skip_reason,
              "its precision (fp32) is not the baseline's (bf16): the two arms do not hold the "
              "same state to resume from");
  }
  EXPECT_TRUE(planned);
}

}  // namespace
}  // namespace bitparity

// A crashed, hung or failing rank ends the whole group: `bitparity arm` exits 3 within the
// recipe's timeout plus a few seconds, names the rank and how it failed, leaves no process
// behind and writes no trace.

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "tests/support/recipe_builder.h"
#include "tests/support/test_support.h"

namespace bitparity {
namespace {

constexpr double kTimeoutSeconds = 10;

std::string RecipeToml() {
  return testing::RecipeBuilder(2, 0)
      .Set("parallel.timeout_s", kTimeoutSeconds)
      .Batches(8, 4)
      .Arm("reference", "reference")
      .Text();
}

struct Fault {
  std::string name;
  std::string spec;      // BITPARITY_FAULT
  std::string expected;  // in the launcher's message
};

class FaultInjectionTest : public ::testing::TestWithParam<Fault> {};

TEST_P(FaultInjectionTest, GroupEndsWithExitThreeAndNothingLeftBehind) {
  const Fault& fault = GetParam();
  testing::TempDir dir;
  const std::string recipe = dir.Write("fault.toml", RecipeToml());
  const std::string trace = dir.File("trace.h5");
  testing::CommandResult r = testing::RunBitparity({"arm", recipe, "--out", trace, "--quiet"},
                                                   {{"BITPARITY_FAULT", fault.spec}});
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_NE(r.output.find(fault.expected), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("last lines of"), std::string::npos) << r.output;
  EXPECT_LT(r.seconds, kTimeoutSeconds + 6) << r.output;
  EXPECT_FALSE(std::filesystem::exists(trace));
  for (const auto& entry : std::filesystem::directory_iterator(dir.path())) {
    const std::string name = entry.path().filename().string();
    EXPECT_EQ(name.find("trace.h5.parts"), std::string::npos) << "partial results left: " << name;
  }
  EXPECT_TRUE(testing::ProcessesMentioning(dir.path()).empty()) << "a rank outlived the launcher";
  // Every rank that started names its process group in its log; none of the group survives.
  const std::vector<int64_t> groups = testing::RankProcessGroups(trace + ".logs");
  EXPECT_FALSE(groups.empty()) << "no rank log names its process group";
  for (int64_t pgid : groups) {
    EXPECT_TRUE(testing::ProcessesInGroup(pgid).empty())
        << "a process of the ranks' group " << pgid << " outlived the launcher";
  }
}

INSTANTIATE_TEST_SUITE_P(
    Faults, FaultInjectionTest,
    ::testing::Values(Fault{"crash", "crash,rank=1,iteration=2", "rank 1 was killed by signal 6"},
                      Fault{"segfault", "segv,rank=0,iteration=3",
                            "rank 0 was killed by signal 11"},
                      Fault{"error", "error,rank=1,iteration=2", "rank 1 exited with code 1"},
                      Fault{"startup", "startup,rank=1", "rank 1 exited with code 1"},
                      Fault{"hang", "hang,rank=1,iteration=2", "rank 1 was still running"},
                      // No rank is left to time out on a silent peer: the launcher's deadline.
                      Fault{"every_rank_hangs", "hang,rank=all,iteration=2",
                            "the run exceeded the recipe's timeout of 10 s; rank 0 was still "
                            "running and was ended"}),
    [](const ::testing::TestParamInfo<Fault>& info) { return info.param.name; });

TEST(FaultInjection, MalformedSwitchIsBadInput) {
  testing::TempDir dir;
  const std::string recipe = dir.Write("fault.toml", RecipeToml());
  testing::CommandResult r =
      testing::RunBitparity({"arm", recipe, "--out", dir.File("t.h5"), "--quiet"},
                            {{"BITPARITY_FAULT", "explode,rank=1"}});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("BITPARITY_FAULT: kind must be"), std::string::npos) << r.output;
}

// A rank that fails on its own with exit 3 (here: out of file descriptors under `ulimit -n 10`)
// long before a collective would give up on a peer is the one named, with its own message, not
// the peer still waiting for it.
TEST(FaultInjection, TheFirstRankToFailOnItsOwnIsNamedWithItsMessage) {
  testing::TempDir dir;
  // A timeout of 60 s: its collectives would wait 36 s for a peer, far longer than a rank takes to
  // start and fail here even on a loaded machine.
  const std::string recipe = dir.Write("fault.toml", testing::RecipeBuilder(2, 0)
                                                         .Set("parallel.timeout_s", 60)
                                                         .Batches(8, 4)
                                                         .Arm("reference", "reference")
                                                         .Text());
  const testing::CommandResult r = testing::RunWithBitparityVariable(
      "bash",
      {"-c", "ulimit -n 10 || exit 99\nexec \"$BITPARITY\" arm '" + recipe + "' --out '" +
                 dir.File("t.h5") + "' --quiet"},
      dir.File("arm.log"));
  EXPECT_EQ(r.exit_code, 3) << r.output;
  const std::string& output = r.output;
  const std::string headline = output.substr(0, output.find('\n'));
  EXPECT_NE(headline.find("exited with code 3: rank "), std::string::npos) << output;
  EXPECT_EQ(headline.find("still running"), std::string::npos) << output;
  EXPECT_FALSE(std::filesystem::exists(dir.File("t.h5")));
}

}  // namespace
}  // namespace bitparity

// The rank contract's lines and command line, pinned: the worker prints them and the launcher
// parses them, so a change on one side must be a change of this test.

#include "comm/rank_protocol.h"

#include <gtest/gtest.h>

namespace bitparity {
namespace {

TEST(RankProtocol, WorkerArgumentsNameEveryRequestedOption) {
  WorkerRequest request;
  request.recipe_path = "/r/default.toml";
  request.arm = "overlap";
  request.out_dir = "/o/parts";
  EXPECT_EQ(WorkerArguments(request),
            (std::vector<std::string>{"worker", "--recipe", "/r/default.toml", "--arm", "overlap",
                                      "--out-dir", "/o/parts"}));
  request.dump_at = {3, 7};
  request.stop_after = 7;
  request.memory_timeline = true;
  EXPECT_EQ(WorkerArguments(request),
            (std::vector<std::string>{"worker", "--recipe", "/r/default.toml", "--arm", "overlap",
                                      "--out-dir", "/o/parts", "--dump-at", "3,7", "--stop-after",
                                      "7", "--memory-timeline"}));
}

TEST(RankProtocol, PartFileNamesSortByRank) {
  EXPECT_EQ(RankPartFileName(0), "rank_00000.h5");
  EXPECT_EQ(RankPartFileName(12), "rank_00012.h5");
}

TEST(RankProtocol, ProgressLineIsPinnedAndReadsBack) {
  const ProgressEvent event{3, 20, 10.375, 0.5, 1e-3, 0.25, 1048576};
  const std::string line = FormatProgressLine(event);
  EXPECT_EQ(line,
            "@progress iteration=3 iterations=20 loss=10.375000 grad_norm=0.5 lr=0.001 "
            "step_seconds=0.2500 peak_bytes=1048576");
  std::optional<ProgressEvent> back = ParseProgressLine(line);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->iteration, 3);
  EXPECT_EQ(back->iterations, 20);
  EXPECT_EQ(back->loss, 10.375);
  EXPECT_EQ(back->grad_norm, 0.5);
  EXPECT_EQ(back->learning_rate, 1e-3);
  EXPECT_EQ(back->step_seconds, 0.25);
  EXPECT_EQ(back->peak_bytes, 1048576);
}

TEST(RankProtocol, OtherLinesAndMalformedFieldsAreNotProgress) {
  EXPECT_FALSE(ParseProgressLine("iteration 3 loss 1.0").has_value());
  EXPECT_FALSE(ParseProgressLine("@rank rank=0 pid=1 pgid=1").has_value());
  EXPECT_FALSE(ParseProgressLine("@progress iteration=3x loss=1").has_value());
  EXPECT_FALSE(ParseProgressLine("@progress iteration=3 loss=one").has_value());
}

TEST(RankProtocol, RankIdentityLineIsPinnedAndReadsBack) {
  const std::string line = FormatRankIdentityLine({2, 4242, 4240});
  EXPECT_EQ(line, "@rank rank=2 pid=4242 pgid=4240");
  std::optional<RankIdentity> back = ParseRankIdentityLine(line);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->rank, 2);
  EXPECT_EQ(back->pid, 4242);
  EXPECT_EQ(back->process_group, 4240);
  EXPECT_FALSE(ParseRankIdentityLine("@rank rank=2 pid=4242").has_value());
  EXPECT_FALSE(ParseRankIdentityLine("@progress iteration=1").has_value());
}

}  // namespace
}  // namespace bitparity

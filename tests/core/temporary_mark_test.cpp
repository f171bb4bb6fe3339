// The mark in bitparity's temporaries' names: parsed back, and judged gone only when it proves
// its owner gone (this machine, and the pid dead or another process).

#include "core/temporary_mark.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>

namespace bitparity {
namespace {

TEST(TemporaryMark, ThisProcessIsNeverGone) {
  const std::optional<TemporaryMark> mark = ParseTemporaryMark("a.h5.tmp." + ThisProcessMark());
  ASSERT_TRUE(mark.has_value());
  EXPECT_EQ(mark->machine, ThisMachineMark());
  EXPECT_EQ(mark->pid, ::getpid());
  EXPECT_GT(mark->start, 0u);
  EXPECT_FALSE(OwnerIsGone(*mark));
}

TEST(TemporaryMark, AnEndedProcessOfThisMachineIsGone) {
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ASSERT_GT(child, 0);
  int status = 0;
  ::waitpid(child, &status, 0);
  const auto mark =
      ParseTemporaryMark("t.h5.parts." + ThisMachineMark() + "-" + std::to_string(child) + "-5");
  ASSERT_TRUE(mark.has_value());
  EXPECT_TRUE(OwnerIsGone(*mark));
}

// A live pid (the parent's) whose start time is not the mark's: the pid was reused, the owner
// is gone.
TEST(TemporaryMark, AReusedPidIsGone) {
  const auto mark = ParseTemporaryMark("r.json.tmp." + ThisMachineMark() + "-" +
                                       std::to_string(::getppid()) + "-1");
  ASSERT_TRUE(mark.has_value());
  EXPECT_TRUE(OwnerIsGone(*mark));
}

// Another machine's or container's mark, and names without a mark, are never judged.
TEST(TemporaryMark, OnlyAMarkOfThisMachineIsJudged) {
  const std::string other =
      ThisMachineMark() == "0123456789abcdef" ? "fedcba9876543210" : "0123456789abcdef";
  const auto foreign = ParseTemporaryMark("x.parts." + other + "-999999999-1");
  ASSERT_TRUE(foreign.has_value());
  EXPECT_FALSE(OwnerIsGone(*foreign));
  for (const char* name :
       {"notes.parts.4242", "x.tmp.999999999", "x.tmp.0123-1-2", "x.tmp.0123456789abcdeg-1-2",
        "x.parts.0123456789abcdef-1-", "x.parts.0123456789abcdef--1", "plain.h5"}) {
    EXPECT_FALSE(ParseTemporaryMark(name).has_value()) << name;
  }
}

}  // namespace
}  // namespace bitparity

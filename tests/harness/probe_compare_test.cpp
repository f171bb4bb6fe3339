// Node probes: stored and read back record for record, and read the way a person needs them: the
// first divergent operation of each rank (a one-bit change in one digest is found and named at
// its operation), and every replay output against its first pass.

#include "harness/probe_compare.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "harness/checks.h"
#include "tests/support/test_support.h"
#include "tests/support/trace_builder.h"
#include "trace/trace.h"

namespace bitparity {
namespace {

ProbeRecord Probe(int64_t iteration, int64_t microbatch, const std::string& layer,
                  const std::string& node, const std::string& phase, int64_t slot,
                  uint64_t digest) {
  ProbeRecord r;
  r.iteration = iteration;
  r.microbatch = microbatch;
  r.chunk = 0;
  r.layer = layer;
  r.node = node;
  r.phase = phase;
  r.slot = slot;
  r.digest = digest;
  r.dtype = "BFloat16";
  r.shape = {2, 16, 32};
  return r;
}

// Two ranks; decoder 1 is recomputed: its attn and mlp run forward, then replay before the
// backward.
Trace ProbedTrace() {
  Trace trace = testing::MakeTrace(2, 3);
  for (RankTrace& rank : trace.ranks) {
    const uint64_t base = 1000 * static_cast<uint64_t>(rank.rank + 1);
    rank.probes = {
        Probe(1, 0, "decoder 0", "attn", "forward", 0, base + 1),
        Probe(1, 0, "decoder 0", "moe_combine", "forward", 0, base + 2),
        Probe(1, 0, "decoder 1", "attn", "forward", 0, base + 3),
        Probe(1, 0, "decoder 1", "attn", "forward", 1, base + 4),
        Probe(1, 0, "decoder 1", "mlp", "forward", 0, base + 5),
        Probe(1, 0, "decoder 1", "attn", "replay", 0, base + 3),
        Probe(1, 0, "decoder 1", "attn", "replay", 1, base + 4),
        Probe(1, 0, "decoder 1", "mlp", "replay", 0, base + 5),
        Probe(1, 0, "decoder 1", "mlp", "backward", 0, base + 6),
        Probe(1, 0, "decoder 1", "attn", "backward", 0, base + 7),
    };
  }
  return trace;
}

TEST(NodeProbes, RoundTripThroughTheTraceFile) {
  testing::TempDir dir;
  const Trace written = ProbedTrace();
  WriteTrace(dir.File("t.h5"), written);
  const Trace read = ReadTrace(dir.File("t.h5"));
  ASSERT_EQ(read.ranks.size(), 2u);
  for (size_t r = 0; r < 2; ++r) {
    const std::vector<ProbeRecord>& a = written.ranks[r].probes;
    const std::vector<ProbeRecord>& b = read.ranks[r].probes;
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_EQ(DescribeProbe(a[i]), DescribeProbe(b[i]));
      EXPECT_EQ(a[i].digest, b[i].digest);
      EXPECT_EQ(a[i].dtype, b[i].dtype);
      EXPECT_EQ(a[i].shape, b[i].shape);
    }
  }
  // A trace without probes reads back without them, and comparing it names nothing.
  testing::TempDir plain_dir;
  WriteTrace(plain_dir.File("plain.h5"), testing::MakeTrace(2, 3));
  const Trace plain = ReadTrace(plain_dir.File("plain.h5"));
  EXPECT_TRUE(plain.ranks[0].probes.empty());
  EXPECT_FALSE(HasProbes(plain));
  EXPECT_TRUE(FirstProbeDivergences(plain, written).empty());
}

TEST(NodeProbes, OneBitInOneDigestIsNamedAtItsOperationPerRank) {
  const Trace a = ProbedTrace();
  EXPECT_TRUE(FirstProbeDivergences(a, a).empty());
  Trace b = ProbedTrace();
  b.ranks[1].probes[4].digest ^= 1;  // rank 1, decoder 1 mlp forward: one bit
  b.ranks[1].probes[7].digest ^= 1;  // and what follows from it
  const std::vector<ProbeDivergence> found = FirstProbeDivergences(a, b);
  ASSERT_EQ(found.size(), 1u);  // rank 0 is equal
  EXPECT_EQ(found[0].rank, 1);
  EXPECT_EQ(found[0].index, 4u);
  EXPECT_EQ(found[0].Describe(),
            "rank 1: first divergent operation: iteration 1, microbatch 0, chunk 0, decoder 1, "
            "mlp forward, output 0 (everything the rank computed before it is equal; the tensor "
            "differs: digest 0x00000000000007d5 vs 0x00000000000007d4)");
  // A run that stopped early, and a run that ran another operation.
  Trace shorter = ProbedTrace();
  shorter.ranks[0].probes.resize(3);
  EXPECT_NE(FirstProbeDivergences(a, shorter)[0].Describe().find("recorded no more operations"),
            std::string::npos);
  Trace other = ProbedTrace();
  other.ranks[0].probes[1].node = "mhc_post";
  EXPECT_NE(FirstProbeDivergences(a, other)[0].Describe().find(
                "the other run ran iteration 1, microbatch 0, chunk 0, decoder 0, mhc_post"),
            std::string::npos);
}

TEST(NodeProbes, AReplayThatDiffersFromItsFirstPassIsNamed) {
  Trace trace = ProbedTrace();
  int64_t replays = 0;
  EXPECT_TRUE(ReplayMismatches(trace, &replays).empty());
  EXPECT_EQ(replays, 6);  // 3 replay outputs x 2 ranks
  CheckResult pass = CheckReplays("overlap", {&trace});
  EXPECT_EQ(pass.verdict, Verdict::kPass) << pass.summary;

  trace.ranks[0].probes[6].digest ^= 1;  // rank 0: decoder 1 attn replay, output 1
  const std::vector<ReplayMismatch> found = ReplayMismatches(trace);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].Describe(),
            "rank 0: iteration 1, microbatch 0, chunk 0, decoder 1, attn replay, output 1 differs "
            "from its first pass (digest 0x00000000000003ed vs 0x00000000000003ec)");
  CheckResult fail = CheckReplays("overlap", {&trace});
  EXPECT_EQ(fail.verdict, Verdict::kFail);
  EXPECT_NE(fail.summary.find("run 1, rank 0: iteration 1, microbatch 0, chunk 0, decoder 1, attn "
                              "replay, output 1 differs from its first pass"),
            std::string::npos)
      << fail.summary;

  // No replay probed at all: nothing to check, and the check says so.
  const Trace none = testing::MakeTrace(2, 3);
  EXPECT_EQ(CheckReplays("reference", {&none}).verdict, Verdict::kSkipped);
}

TEST(NodeProbes, ARunThatDiffersNamesEachRanksFirstDivergentOperation) {
  const Trace a = ProbedTrace();
  Trace b = ProbedTrace();
  b.ranks[0].probes[8].digest ^= 1;               // rank 0: decoder 1 mlp backward
  b.ranks[0].iterations[0].grad_digests[0] ^= 1;  // and the gradient it feeds
  CheckResult check = CheckReproduces("overlap", {&a, &b});
  EXPECT_EQ(check.verdict, Verdict::kFail);
  ASSERT_TRUE(check.first_divergent_operations.has_value()) << check.AllFigures().dump();
  EXPECT_EQ((*check.first_divergent_operations)[0].substr(0, 112),
            "rank 0: first divergent operation: iteration 1, microbatch 0, chunk 0, decoder 1, "
            "mlp backward, input gradient 0");
  EXPECT_NE(check.details.find("mlp backward, input gradient 0"), std::string::npos)
      << check.details;
}

TEST(NodeProbes, AcrossArmsRecordsAlignByKeyWhateverTheOrder) {
  // The baseline ran the same operations in another order, and without replays.
  const Trace overlap = ProbedTrace();
  Trace reference = ProbedTrace();
  for (RankTrace& rank : reference.ranks) {
    std::vector<ProbeRecord> reordered;
    for (const ProbeRecord& p : rank.probes) {
      if (p.phase != "replay") reordered.insert(reordered.begin(), p);
    }
    rank.probes = reordered;
  }
  EXPECT_TRUE(FirstCrossArmDivergences(overlap, reference).empty());
  // Rank 0's decoder 1 mlp output differs in the reference, and so does what follows from it.
  reference.ranks[0].probes[2].digest ^= 1;  // reversed: index 2 is decoder 1 mlp forward
  reference.ranks[0].probes[0].digest ^= 1;  // decoder 1 attn backward
  ASSERT_EQ(reference.ranks[0].probes[2].node, "mlp");
  ASSERT_EQ(reference.ranks[0].probes[0].phase, "backward");
  const std::vector<ProbeDivergence> found = FirstCrossArmDivergences(overlap, reference);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].Describe(),
            "rank 0: first divergent operation: iteration 1, microbatch 0, chunk 0, decoder 1, "
            "mlp forward, output 0 (its inputs and everything both arms recorded before it are "
            "equal; the tensor differs: digest 0x00000000000003ed vs 0x00000000000003ec)");
  // A check that failed across arms carries the sentence.
  CheckResult check;
  check.verdict = Verdict::kFail;
  AddFirstDivergentOperations(overlap, reference, /*across_arms=*/true, &check);
  ASSERT_TRUE(check.first_divergent_operations.has_value());
  EXPECT_EQ(check.first_divergent_operations->size(), 1u);
  EXPECT_EQ(check.details.rfind("rank 0: first divergent operation", 0), 0u) << check.details;
}

}  // namespace
}  // namespace bitparity

// A run's throughput and all-to-all breakdown from hand-built traces.

#include "harness/throughput.h"

#include <gtest/gtest.h>

#include <vector>

#include "tests/support/trace_builder.h"
#include "trace/trace_keys.h"

namespace bitparity {
namespace {

TEST(Throughput, ModelFlopsOverStepTimeAgainstTheBestCeilingTheRanksMeasured) {
  Trace trace = testing::MakeTrace(2, 3);  // 0.5 s per step
  for (RankTrace& rank : trace.ranks) {
    rank.attributes[trace_keys::kGemmCeilingFlopsPerSecond] = rank.rank == 0 ? "1e12" : "2e12";
    for (IterationRecord& it : rank.iterations) {
      it.gemm_flops_forward = 100'000'000'000;
      it.gemm_flops_backward = 200'000'000'000;
      it.gemm_flops_replay = rank.rank == 0 ? 50'000'000'000 : 0;
    }
  }
  trace.ranks[0].iterations[0].step_seconds = 10;  // the warm-up does not count
  const Throughput t = ThroughputOf(trace);
  ASSERT_EQ(t.ranks.size(), 2u);
  EXPECT_EQ(t.ranks[0].iterations, 2);
  EXPECT_DOUBLE_EQ(t.ranks[0].model_flops_per_second(), 600e9);
  EXPECT_DOUBLE_EQ(t.ranks[0].hardware_flops_per_second(), 700e9);
  EXPECT_DOUBLE_EQ(t.ranks[0].measured_ceiling_flops_per_second, 1e12);
  EXPECT_DOUBLE_EQ(t.ranks[0].ceiling_flops_per_second, 2e12);  // rank 1's figure is the best
  EXPECT_DOUBLE_EQ(t.ranks[0].mfu(), 0.3);
  EXPECT_DOUBLE_EQ(t.ranks[1].mfu(), 0.3);
  EXPECT_DOUBLE_EQ(t.mfu(), 1200e9 / 4e12);  // every rank's work over every rank's ceiling
  EXPECT_DOUBLE_EQ(t.forward_flops, 200e9);  // per iteration, over ranks
  EXPECT_DOUBLE_EQ(t.replay_flops, 50e9);
  trace.ranks[1].attributes.erase(trace_keys::kGemmCeilingFlopsPerSecond);
  EXPECT_EQ(ThroughputOf(trace).mfu(), 0) << "no MFU without every rank's ceiling";
}

TEST(Throughput, EveryRunOfAnInvocationSharesTheBestCeiling) {
  // Two arms with the same work and time: a rank that measured a low ceiling while another
  // process ran must not make its arm's MFU look higher.
  std::vector<Throughput> runs;
  for (const char* ceiling : {"1.2e12", "2e12"}) {
    Trace trace = testing::MakeTrace(2, 2);
    for (RankTrace& rank : trace.ranks) {
      rank.attributes[trace_keys::kGemmCeilingFlopsPerSecond] = ceiling;
      for (IterationRecord& it : rank.iterations) it.gemm_flops_forward = 500'000'000'000;
    }
    runs.push_back(ThroughputOf(trace));
  }
  EXPECT_GT(runs[0].mfu(), runs[1].mfu()) << "before sharing, the low measurement flatters";
  ShareBestCeiling({&runs[0], &runs[1]});
  EXPECT_DOUBLE_EQ(runs[0].mfu(), runs[1].mfu());
  EXPECT_DOUBLE_EQ(runs[0].ranks[0].ceiling_flops_per_second, 2e12);
  EXPECT_DOUBLE_EQ(runs[0].ranks[0].measured_ceiling_flops_per_second, 1.2e12);
  runs[1].ranks[1].measured_ceiling_flops_per_second = 0;  // a rank without a figure has none
  ShareBestCeiling({&runs[0], &runs[1]});
  EXPECT_EQ(runs[1].mfu(), 0);
}

TEST(AllToAllBreakdown, WaitsByNodeAndPhaseCountExchangesAndTheRestOfTheExposedTime) {
  Trace trace = testing::MakeTrace(2, 2);
  for (RankTrace& rank : trace.ranks) {
    rank.iterations.back().comm_exposed_seconds = 0.010;
    rank.iterations.back().comm_count_exchange_seconds = 0.0015;
    rank.iterations.front().comm_count_exchange_seconds = 1;  // only the last iteration counts
    rank.schedule_timeline = {
        {"attn", 0, 0, 0, 5'000'000, "forward", 0},
        {"moe_dispatch", 0, 1, 1'000'000, 3'000'000, "forward", 1'000'000},
        {"moe_dispatch", 1, 1, 4'000'000, 6'000'000, "replay", 2'000'000},
        {"moe_combine", 1, 1, 6'000'000, 7'000'000, "replay", 1'000'000},
        {"p2p_send", 0, 1, 0, 9'000'000, "forward", 9'000'000}};  // not an all-to-all
  }
  const AllToAllBreakdown b = AllToAllBreakdownOf(trace);
  ASSERT_EQ(b.shares.size(), 3u);
  EXPECT_EQ(b.shares[0].node, "moe_combine");
  EXPECT_EQ(b.shares[1].node, "moe_dispatch");
  EXPECT_EQ(b.shares[1].phase, "forward");
  EXPECT_EQ(b.shares[2].phase, "replay");
  EXPECT_EQ(b.shares[2].count, 2);
  EXPECT_DOUBLE_EQ(b.shares[2].in_flight_seconds, 0.004);
  EXPECT_DOUBLE_EQ(b.shares[2].waited_seconds, 0.004);
  EXPECT_DOUBLE_EQ(b.exposed_seconds, 0.020);
  EXPECT_DOUBLE_EQ(b.waited_seconds, 0.008);
  EXPECT_DOUBLE_EQ(b.count_exchange_seconds, 0.003);
  EXPECT_DOUBLE_EQ(b.other_exposed_seconds(), 0.009);
  EXPECT_TRUE(AllToAllBreakdownOf(testing::MakeTrace(2, 2)).shares.empty());
}

}  // namespace
}  // namespace bitparity

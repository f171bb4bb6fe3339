// The pipeline schedules as data against Megatron's own orders (the tables below are what
// Megatron-LM's forward_backward_pipelining_with_interleaving and its EP-overlap variant run for
// these configurations), and, over many configurations, that every rank's list is complete and
// that the ranks together can run it: every forward finds its input and every backward its
// gradient already produced by the neighbouring stage.

#include "schedule/pipeline_schedule.h"

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

namespace bitparity {
namespace {

std::string Order(int64_t pp, int64_t vpp, int64_t microbatches, int64_t rank,
                  bool overlap = false) {
  PipelineScheduleConfig c;
  c.pp = pp;
  c.vpp = vpp;
  c.microbatches = microbatches;
  c.ep_overlap = overlap;
  return FormatPipelineSchedule(PipelineSchedule(c, rank));
}

TEST(PipelineSchedule, InterleavedOrderIsMegatrons) {
  EXPECT_EQ(Order(2, 2, 4, 0),
            "F0.0 F0.1 F1.0 F1.1 | [F0.2+B1.0] [F0.3+B1.1] [F1.2+B0.0] [F1.3+B0.1] | B1.2 B1.3 "
            "B0.2 B0.3");
  EXPECT_EQ(Order(2, 2, 4, 1),
            "F0.0 F0.1 | [F1.0+B1.0] [F1.1+B1.1] [F0.2+B0.0] [F0.3+B0.1] [F1.2+B1.2] [F1.3+B1.3] "
            "| B0.2 B0.3");
  EXPECT_EQ(Order(4, 2, 8, 0),
            "F0.0 F0.1 F0.2 F0.3 F1.0 F1.1 F1.2 F1.3 F0.4 F0.5 | [F0.6+B1.0] [F0.7+B1.1] "
            "[F1.4+B1.2] [F1.5+B1.3] [F1.6+B0.0] [F1.7+B0.1] | B0.2 B0.3 B1.4 B1.5 B1.6 B1.7 B0.4 "
            "B0.5 B0.6 B0.7");
  EXPECT_EQ(Order(4, 2, 8, 3),
            "F0.0 F0.1 F0.2 F0.3 | [F1.0+B1.0] [F1.1+B1.1] [F1.2+B1.2] [F1.3+B1.3] [F0.4+B0.0] "
            "[F0.5+B0.1] [F0.6+B0.2] [F0.7+B0.3] [F1.4+B1.4] [F1.5+B1.5] [F1.6+B1.6] [F1.7+B1.7] "
            "| B0.4 B0.5 B0.6 B0.7");
}

// Megatron's get_schedule_table with microbatch_group_size_per_vp_stage = 3 at pp 2: three
// microbatches through chunk 0, then the same three through chunk 1, then the next group; rank
// 0 warms up with (pp - 1 - rank) x 2 + (vpp - 1) x G = 5 forwards, Megatron's count.
TEST(PipelineSchedule, AMicrobatchGroupSetsTheInterleavedTable) {
  PipelineScheduleConfig c;
  c.pp = 2;
  c.vpp = 2;
  c.microbatches = 6;
  c.microbatch_group = 3;
  EXPECT_EQ(FormatPipelineSchedule(PipelineSchedule(c, 0)),
            "F0.0 F0.1 F0.2 F1.0 F1.1 | [F1.2+B1.0] [F0.3+B1.1] [F0.4+B1.2] [F0.5+B0.0] "
            "[F1.3+B0.1] [F1.4+B0.2] [F1.5+B1.3] | B1.4 B1.5 B0.3 B0.4 B0.5");
}

TEST(PipelineSchedule, OverlapAddsOneWarmupForward) {
  EXPECT_EQ(Order(2, 2, 4, 0, true),
            "F0.0 F0.1 F1.0 F1.1 F0.2 | [F0.3+B1.0] [F1.2+B1.1] [F1.3+B0.0] | B0.1 B1.2 B1.3 B0.2 "
            "B0.3");
  EXPECT_EQ(Order(2, 2, 4, 1, true),
            "F0.0 F0.1 F1.0 | [F1.1+B1.0] [F0.2+B1.1] [F0.3+B0.0] [F1.2+B0.1] [F1.3+B1.2] | B1.3 "
            "B0.2 B0.3");
  EXPECT_EQ(Order(4, 2, 8, 3, true),
            "F0.0 F0.1 F0.2 F0.3 F1.0 | [F1.1+B1.0] [F1.2+B1.1] [F1.3+B1.2] [F0.4+B1.3] "
            "[F0.5+B0.0] [F0.6+B0.1] [F0.7+B0.2] [F1.4+B0.3] [F1.5+B1.4] [F1.6+B1.5] [F1.7+B1.6] "
            "| B1.7 B0.4 B0.5 B0.6 B0.7");
  // No pipeline: Megatron's combined_1f1b_schedule_for_no_pipelining.
  EXPECT_EQ(Order(1, 1, 3, 0, true), "F0.0 | [F0.1+B0.0] [F0.2+B0.1] | B0.2");
  EXPECT_EQ(Order(1, 1, 3, 0), "[F0.0+B0.0] [F0.1+B0.1] [F0.2+B0.2]");
}

TEST(PipelineSchedule, WithoutInterleavingRankRWarmsUpPpMinusRMinusOne) {
  EXPECT_EQ(Order(4, 1, 8, 0),
            "F0.0 F0.1 F0.2 | [F0.3+B0.0] [F0.4+B0.1] [F0.5+B0.2] [F0.6+B0.3] [F0.7+B0.4] | B0.5 "
            "B0.6 B0.7");
  EXPECT_EQ(Order(4, 1, 2, 1), "F0.0 F0.1 | B0.0 B0.1");
}

TEST(PipelineSchedule, MegatronsRulesHaveMessages) {
  PipelineScheduleConfig c;
  c.pp = 1;
  c.vpp = 2;
  c.microbatches = 4;
  EXPECT_EQ(PipelineScheduleProblem(c),
            "vpp = 2 needs pp > 1 (model chunks interleave across pipeline ranks)");
  c = {};
  c.pp = 2;
  c.ep_overlap = true;
  c.microbatches = 4;
  EXPECT_EQ(PipelineScheduleProblem(c),
            "the EP all-to-all overlap with pp = 2 needs vpp > 1 (Megatron's rule: a combined "
            "step pairs two model chunks)");
  c = {};
  c.pp = 4;
  c.vpp = 2;
  c.microbatches = 3;
  EXPECT_EQ(PipelineScheduleProblem(c),
            "the interleaved schedule takes microbatches in groups of 4 per chunk, which must lie "
            "in [pp, microbatches] = [4, 3]; use at least 4 microbatches per pipeline rank");
  c.microbatches = 6;
  EXPECT_EQ(PipelineScheduleProblem(c),
            "6 microbatches leave 2 after the last full group of 4; the interleaved schedule "
            "needs 0 or at least pp = 4 left (use a multiple of 4)");
  c.microbatches = 8;
  EXPECT_EQ(PipelineScheduleProblem(c), "");
  c.microbatches = 6;
  EXPECT_THROW(PipelineSchedule(c, 0), std::logic_error);
  c.microbatches = 8;
  c.microbatch_group = 3;
  EXPECT_EQ(PipelineScheduleProblem(c),
            "microbatch_group_size = 3 must lie in [pp, microbatches per pipeline rank] = [4, 8] "
            "(Megatron's rule for the interleaved schedule)");
  c.microbatch_group = 5;
  EXPECT_EQ(PipelineScheduleProblem(c),
            "8 microbatches leave 3 after the last full group of 5; the interleaved schedule "
            "needs 0 or at least pp = 4 left (use a multiple of 5)");
}

// Runs every rank's steps with step-level data dependencies: a step starts once its forward's
// input (the previous stage's forward of that microbatch) and its backward's gradient (the next
// stage's backward) exist. Returns "" when all steps ran, else where the ranks got stuck.
std::string Simulate(const PipelineScheduleConfig& c) {
  const int64_t stages = c.pp * c.vpp;
  std::vector<std::vector<PipelineStep>> ranks;
  for (int64_t r = 0; r < c.pp; ++r) ranks.push_back(PipelineSchedule(c, r));
  std::set<std::tuple<char, int64_t, int64_t>> done;  // (F/B, stage, microbatch)
  std::vector<size_t> next(static_cast<size_t>(c.pp), 0);
  auto stage = [&](int64_t r, int64_t chunk) { return chunk * c.pp + r; };
  for (bool progress = true; progress;) {
    progress = false;
    for (int64_t r = 0; r < c.pp; ++r) {
      size_t& i = next[static_cast<size_t>(r)];
      if (i == ranks[static_cast<size_t>(r)].size()) continue;
      const PipelineStep& s = ranks[static_cast<size_t>(r)][i];
      bool ready = true;
      if (s.forward.valid()) {
        const int64_t st = stage(r, s.forward.chunk);
        ready &= st == 0 || done.count({'F', st - 1, s.forward.microbatch}) > 0;
      }
      if (s.backward.valid()) {
        const int64_t st = stage(r, s.backward.chunk);
        ready &= done.count({'F', st, s.backward.microbatch}) > 0 ||
                 (s.forward.valid() && s.forward.chunk == s.backward.chunk &&
                  s.forward.microbatch == s.backward.microbatch);
        ready &= st == stages - 1 || done.count({'B', st + 1, s.backward.microbatch}) > 0;
      }
      if (!ready) continue;
      if (s.forward.valid()) done.insert({'F', stage(r, s.forward.chunk), s.forward.microbatch});
      if (s.backward.valid()) {
        done.insert({'B', stage(r, s.backward.chunk), s.backward.microbatch});
      }
      ++i;
      progress = true;
    }
  }
  for (int64_t r = 0; r < c.pp; ++r) {
    if (next[static_cast<size_t>(r)] != ranks[static_cast<size_t>(r)].size()) {
      return "rank " + std::to_string(r) + " stuck at step " +
             std::to_string(next[static_cast<size_t>(r)]);
    }
  }
  return "";
}

TEST(PipelineSchedule, EveryPassOnceAndTheRanksTogetherCanRunIt) {
  int checked = 0;
  for (int64_t pp : {1, 2, 3, 4}) {
    for (int64_t vpp : {1, 2, 3}) {
      for (int64_t microbatches = 1; microbatches <= 12; ++microbatches) {
        for (int64_t configuration = 0; configuration < 6; ++configuration) {
          const bool overlap = configuration % 2 == 1;
          const int64_t group = configuration / 2 == 0 ? 0 : pp + configuration / 2 - 1;
          PipelineScheduleConfig c;
          c.pp = pp;
          c.vpp = vpp;
          c.microbatches = microbatches;
          c.microbatch_group = group;
          c.ep_overlap = overlap;
          if ((group > 0 && vpp == 1) || !PipelineScheduleProblem(c).empty()) continue;
          const std::string name = "pp " + std::to_string(pp) + " vpp " + std::to_string(vpp) +
                                   " mb " + std::to_string(microbatches) + " group " +
                                   std::to_string(group) + (overlap ? " overlap" : "");
          for (int64_t r = 0; r < pp; ++r) {
            std::map<std::pair<int64_t, int64_t>, int> forwards, backwards;
            for (const PipelineStep& s : PipelineSchedule(c, r)) {
              if (s.forward.valid()) ++forwards[{s.forward.chunk, s.forward.microbatch}];
              if (s.backward.valid()) {
                ASSERT_EQ(forwards.count({s.backward.chunk, s.backward.microbatch}), 1u)
                    << name << ": a backward before its forward on rank " << r;
                ++backwards[{s.backward.chunk, s.backward.microbatch}];
              }
              // The overlap arm's combined step needs a forward and a backward of two pairs.
              if (overlap && s.forward.valid() && s.backward.valid()) {
                EXPECT_FALSE(s.forward.chunk == s.backward.chunk &&
                             s.forward.microbatch == s.backward.microbatch)
                    << name << " rank " << r;
              }
            }
            EXPECT_EQ(forwards.size(), static_cast<size_t>(vpp * microbatches)) << name;
            EXPECT_EQ(backwards.size(), static_cast<size_t>(vpp * microbatches)) << name;
            for (const auto& [pass, n] : forwards) EXPECT_EQ(n, 1) << name;
            for (const auto& [pass, n] : backwards) EXPECT_EQ(n, 1) << name;
          }
          EXPECT_EQ(Simulate(c), "") << name;
          ++checked;
        }
      }
    }
  }
  EXPECT_GT(checked, 60);
}

}  // namespace
}  // namespace bitparity

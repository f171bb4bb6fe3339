// The parity tests' comparison of two runs' records (tests/support/thread_trainer.h) compares
// their shapes before their values: a run that recorded fewer iterations, other parameters or
// fewer digests is a difference, never a pass over the records both have.

#include <gtest/gtest.h>

#include "tests/support/thread_trainer.h"

namespace bitparity {
namespace {

testing::RankRecords Records(int64_t ranks, int64_t iterations) {
  testing::RankRecords r;
  for (int64_t rank = 0; rank < ranks; ++rank) {
    r.params.push_back({"w", "b"});
    r.replicated.push_back({1, 1});
    std::vector<IterationRecord> its;
    for (int64_t i = 1; i <= iterations; ++i) {
      IterationRecord rec;
      rec.iteration = i;
      rec.loss = 1.0f / static_cast<float>(i);
      rec.grad_digests = {11, 12};
      rec.param_digests = {21, 22};
      its.push_back(rec);
    }
    r.records.push_back(its);
  }
  return r;
}

TEST(FirstDifference, ComparesShapesBeforeValues) {
  const testing::RankRecords base = Records(2, 3);
  EXPECT_EQ(testing::FirstDifference(base, Records(2, 3)), "");
  EXPECT_EQ(testing::FirstDifference(base, Records(1, 3)), "different world sizes: 2 vs 1 ranks");
  EXPECT_EQ(testing::FirstDifference(base, Records(2, 2)), "rank 0: 3 vs 2 iterations");
  testing::RankRecords renamed = Records(2, 3);
  renamed.params[1][0] = "v";
  EXPECT_EQ(testing::FirstDifference(base, renamed), "rank 1: different parameters");
  testing::RankRecords fewer = Records(2, 3);
  fewer.records[0][1].grad_digests.pop_back();
  EXPECT_EQ(testing::FirstDifference(base, fewer), "rank 0: iteration 2: different digest counts");
  testing::RankRecords value = Records(2, 3);
  value.records[1][2].grad_digests[1] = 99;
  EXPECT_EQ(testing::FirstDifference(base, value), "iteration 3, rank 1: main grad of b");
}

}  // namespace
}  // namespace bitparity

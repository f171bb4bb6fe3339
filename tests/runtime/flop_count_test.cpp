// Counted GEMM FLOPs (numerics/flop_count.h): the counter's bookkeeping, and one training
// iteration's counts checked against the model's shapes worked out by hand, the same in both arms.

#include "numerics/flop_count.h"

#include <gtest/gtest.h>

#include "config/recipe.h"
#include "tests/support/recipe_builder.h"
#include "tests/support/thread_trainer.h"

namespace bitparity {
namespace {

TEST(FlopCounter, CountsByPassAndCategoryOnlyWhileInstalled) {
  FlopCounter::CountGemm(1, 2, 3, 4, 2);  // no counter: nothing to count into
  FlopCounter counter;
  EXPECT_EQ(FlopCounter::current(), &counter);
  FlopCounter::CountGemm(1, 2, 3, 4, 0);  // 48 FLOPs, category other, no backward
  {
    const GemmCategoryScope attention(GemmCategory::kAttention);
    FlopCounter::CountGemm(8, 16, 16, 8, 2);  // 32768, and twice that in backward
    const FlopReplayScope replay;
    const GemmCategoryScope expert(GemmCategory::kExpert);
    FlopCounter::CountGemm(1, 10, 20, 30, 1);  // 12000 replayed, 12000 backward
  }
  FlopCounter::CountGemm(1, 1, 1, 1, 0);  // scopes ended: forward, other
  const FlopCount count = counter.Take();
  EXPECT_EQ(count.of(FlopPass::kForward), 48 + 32768 + 2);
  EXPECT_EQ(count.of(FlopPass::kReplay), 12000);
  EXPECT_EQ(count.of(FlopPass::kBackward), 2 * 32768 + 12000);
  EXPECT_EQ(count.of(GemmCategory::kAttention), 3 * 32768);
  EXPECT_EQ(count.of(GemmCategory::kExpert), 24000);
  EXPECT_EQ(count.of(GemmCategory::kOther), 50);
  EXPECT_EQ(count.model(), count.total() - 12000);
  EXPECT_EQ(counter.Take().total(), 0);  // Take forgets
  {
    const FlopCounterScope none(nullptr);
    FlopCounter::CountGemm(1, 5, 5, 5, 2);
  }
  EXPECT_EQ(counter.Take().total(), 0);
}

// The small model (hidden 32, 4 heads, seq 16, 3 layers of which 1 dense, 4 experts top-2,
// moe_ffn 32, ffn 64, vocab 64, one MTP depth), micro-batch 2, 3 microbatches on each of 2 ranks.
struct SmallModelFlops {
  static constexpr int64_t kTokens = 2 * 16;       // per microbatch and rank
  static constexpr int64_t kMicrobatches = 3 * 2;  // over both ranks
  // One layer's attention for one microbatch: qkv, proj, and the two products per head.
  static constexpr int64_t kAttention =
      2 * kTokens * 32 * 96 + 2 * kTokens * 32 * 32 + 2 * (2 * 2 * 4 * 16 * 16 * 8);
  static constexpr int64_t kDense = 2 * kTokens * 32 * 128 + 2 * kTokens * 64 * 32;
  // Every token goes to 2 experts (no capacity limit): 2 * kTokens rows per rank.
  static constexpr int64_t kExpertRows = 2 * kTokens;
  static constexpr int64_t kExperts = kExpertRows * (2 * 32 * 64 + 2 * 32 * 32);
  static constexpr int64_t kHead = 2 * kTokens * 64 * 32;   // per use: main and MTP
  static constexpr int64_t kRouter = 2 * kTokens * 32 * 4;  // per MoE layer
  static constexpr int64_t kMtpProjection = 2 * kTokens * 64 * 32;
  // First forward pass over one microbatch: 4 attention layers (3 decoder + MTP), 1 dense MLP,
  // 3 MoE layers (2 decoder + MTP), the head twice, the MTP projection.
  static constexpr int64_t kForwardPerMicrobatch =
      4 * kAttention + kDense + 3 * kExperts + 2 * kHead + 3 * kRouter + kMtpProjection;
};

// Summed over ranks, for one iteration.
FlopCount IterationTotals(const testing::RankRecords& records, size_t iteration) {
  FlopCount sum;
  for (const auto& rank : records.records) {
    const IterationRecord& r = rank.at(iteration);
    FlopCount c;
    c.flops[static_cast<size_t>(FlopPass::kForward)][0] = r.gemm_flops_forward;
    c.flops[static_cast<size_t>(FlopPass::kReplay)][0] = r.gemm_flops_replay;
    c.flops[static_cast<size_t>(FlopPass::kBackward)][0] = r.gemm_flops_backward;
    sum += c;
  }
  return sum;
}

int64_t CategorySum(const testing::RankRecords& records, size_t iteration,
                    int64_t IterationRecord::*member) {
  int64_t sum = 0;
  for (const auto& rank : records.records) sum += rank.at(iteration).*member;
  return sum;
}

TEST(CountedFlops, MatchTheModelShapesInBothArmsWithAndWithoutRecompute) {
  const Recipe recipe = testing::RecipeBuilder(3, 1)
                            .Set("train.iterations", 2)
                            .ParityArms(testing::FullRecompute("uniform", 1))
                            .Arm("overlap_none", "overlap")
                            .Build("flops.toml");
  using M = SmallModelFlops;
  const int64_t forward = M::kMicrobatches * M::kForwardPerMicrobatch;
  const int64_t head = M::kMicrobatches * 2 * M::kHead;
  for (const char* arm : {"reference", "overlap", "reference_none", "overlap_none"}) {
    SCOPED_TRACE(arm);
    const bool recompute = std::string(arm).find("none") == std::string::npos;
    const testing::RankRecords records = testing::TrainOnThreads(recipe, arm);
    for (size_t it = 0; it < 2; ++it) {
      const FlopCount totals = IterationTotals(records, it);
      EXPECT_EQ(totals.of(FlopPass::kForward), forward);
      // Every GEMM has two operands that need a gradient; the head is never recomputed.
      EXPECT_EQ(totals.of(FlopPass::kBackward), 2 * forward);
      EXPECT_EQ(totals.of(FlopPass::kReplay), recompute ? forward - head : 0);
      const int64_t passes = recompute ? 4 : 3;  // first pass, [replay,] dgrad and wgrad
      EXPECT_EQ(CategorySum(records, it, &IterationRecord::gemm_flops_attention),
                passes * M::kMicrobatches * 4 * M::kAttention);
      EXPECT_EQ(CategorySum(records, it, &IterationRecord::gemm_flops_dense),
                passes * M::kMicrobatches * M::kDense);
      EXPECT_EQ(CategorySum(records, it, &IterationRecord::gemm_flops_expert),
                passes * M::kMicrobatches * 3 * M::kExperts);
      EXPECT_EQ(CategorySum(records, it, &IterationRecord::gemm_flops_head), 3 * head);
      EXPECT_EQ(CategorySum(records, it, &IterationRecord::gemm_flops_other),
                passes * M::kMicrobatches * (3 * M::kRouter + M::kMtpProjection));
    }
  }
}

// Expert FLOPs follow the routing actually taken: each rank's count is its own experts' rows,
// which differ between the ranks, and are the same in both arms.
TEST(CountedFlops, ExpertFlopsFollowTheRoutingAndAgreeBetweenArms) {
  const Recipe recipe = testing::RecipeBuilder(3, 0)
                            .Set("train.iterations", 1)
                            .ParityArms(testing::FullRecompute("uniform", 1))
                            .Build("flops.toml");
  const testing::RankRecords reference = testing::TrainOnThreads(recipe, "reference");
  const testing::RankRecords overlap = testing::TrainOnThreads(recipe, "overlap");
  ASSERT_EQ(reference.records.size(), 2u);
  const int64_t rank0 = reference.records[0][0].gemm_flops_expert;
  const int64_t rank1 = reference.records[1][0].gemm_flops_expert;
  EXPECT_NE(rank0, rank1);  // the router does not split the rows evenly here
  EXPECT_EQ(overlap.records[0][0].gemm_flops_expert, rank0);
  EXPECT_EQ(overlap.records[1][0].gemm_flops_expert, rank1);
  // Together: 2 MoE layers, 6 microbatches, 64 rows each, 4 passes.
  EXPECT_EQ(rank0 + rank1, 4 * 6 * 2 * SmallModelFlops::kExperts);
}

}  // namespace
}  // namespace bitparity

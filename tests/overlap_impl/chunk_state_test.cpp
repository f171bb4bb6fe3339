// The complete chunk state with padded samples. Samples of varying length are padded to seq_len:
// padded tokens carry id, label and position 0, no loss and a padded key, and MTP rolls ids,
// positions and the mask together. Then:
// - the overlap arm equals the reference arm bit for bit, and both equal the reference without
//   recompute, with padding and dropout, under every recompute method, with and without MTP and a
//   pipeline;
// - a replay that does not restore one field of the segment snapshot is caught where the field
//   is read, and the gradients name the parameters it corrupts.

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ostream>
#include <string>
#include <vector>

#include "config/recipe.h"
#include "numerics/synthetic_data.h"
#include "tests/support/recipe_builder.h"
#include "tests/support/thread_trainer.h"

namespace bitparity {
namespace {

// seq_len 16; samples of 9 to 16 tokens.
testing::RecipeBuilder Padded(int layers, int mtp_layers) {
  testing::RecipeBuilder builder(layers, mtp_layers);
  builder.Set("data.min_length", int64_t{9}).Set("train.lr", 1e-2);
  return builder;
}

TEST(PaddedData, SampleLengthsAreKeyedAndCoverTheRange) {
  const MarkovCorpus corpus(7, 64, 4);
  std::vector<int64_t> seen(17, 0);
  for (int64_t i = 0; i < 400; ++i) {
    const int64_t length = corpus.SampleLength(3, i, 9, 16);
    ASSERT_GE(length, 9);
    ASSERT_LE(length, 16);
    ++seen[static_cast<size_t>(length)];
    EXPECT_EQ(length, corpus.SampleLength(3, i, 9, 16));
  }
  for (int64_t length = 9; length <= 16; ++length) {
    EXPECT_GT(seen[static_cast<size_t>(length)], 0) << length;
  }
  EXPECT_EQ(corpus.SampleLength(3, 0, 16, 16), 16);
}

TEST(PaddedData, MicrobatchesMarkEveryPaddedTokenTheSameWay) {
  const Recipe recipe = Padded(2, 1)
                            .Set("train.iterations", int64_t{1})
                            .Arm("reference", "reference")
                            .Build("padded_data.toml");
  std::vector<std::vector<ChunkState>> batches(static_cast<size_t>(recipe.world_size()));
  testing::ThreadTrainOptions options;
  options.on_trainer = [&batches](int64_t rank, Trainer& trainer) {
    batches[static_cast<size_t>(rank)] = trainer.MakeMicrobatches(1);
  };
  testing::TrainOnThreads(recipe, "reference", options);
  int64_t padded_tokens = 0, tokens = 0;
  for (const std::vector<ChunkState>& microbatches : batches) {
    ASSERT_FALSE(microbatches.empty());
    for (const ChunkState& state : microbatches) {
      ASSERT_TRUE(state.position_ids.defined());
      ASSERT_TRUE(state.padding_mask.defined());
      const at::Tensor pad = state.padding_mask;
      EXPECT_TRUE(at::equal(pad, state.loss_mask == 0));
      EXPECT_EQ(state.input_ids.masked_select(pad).ne(0).sum().item<int64_t>(), 0);
      EXPECT_EQ(state.labels.masked_select(pad).ne(0).sum().item<int64_t>(), 0);
      EXPECT_EQ(state.position_ids.masked_select(pad).ne(0).sum().item<int64_t>(), 0);
      // Real tokens first, at positions 0, 1, ...; at least 9 of them.
      const at::Tensor real = pad.logical_not();
      const at::Tensor expected = at::arange(16, at::kLong).repeat({pad.size(0), 1});
      EXPECT_TRUE(at::equal(state.position_ids, expected * real));
      EXPECT_TRUE(at::equal(real.to(at::kLong).cumprod(1), real.to(at::kLong)));
      EXPECT_GE(real.sum(1).min().item<int64_t>(), 9);
      padded_tokens += pad.sum().item<int64_t>();
      tokens += pad.numel();
    }
  }
  EXPECT_GT(padded_tokens, 0);
  EXPECT_LT(padded_tokens, tokens);
  std::printf("padded tokens: %lld of %lld\n", static_cast<long long>(padded_tokens),
              static_cast<long long>(tokens));
}

TEST(PaddedData, PaddingChangesTheStepAndLossesSkipThePaddedTokens) {
  // Against the same recipe without padding: the padded run is another run (different losses),
  // and so it is not a padding that does nothing.
  const Recipe padded = Padded(2, 1).Arm("reference", "reference").Build("padded.toml");
  const Recipe full = testing::RecipeBuilder(2, 1)
                          .Set("train.lr", 1e-2)
                          .Arm("reference", "reference")
                          .Build("full.toml");
  const testing::RankRecords a = testing::TrainOnThreads(padded, "reference");
  const testing::RankRecords b = testing::TrainOnThreads(full, "reference");
  const std::string difference = testing::FirstDifference(a, b);
  EXPECT_NE(difference.find("iteration 1, rank 0: loss"), std::string::npos) << difference;
}

struct PaddedParityCase {
  std::string name;
  int mtp_layers;
  std::string recompute;  // "none" or method-num_layers
  std::string precision;
  bool dropout = false;
  int pp = 1;  // with pp > 1: vpp 2, 4 layers
};

void PrintTo(const PaddedParityCase& c, std::ostream* os) { *os << c.name; }

class PaddedParityTest : public ::testing::TestWithParam<PaddedParityCase> {};

TEST_P(PaddedParityTest, OverlapEqualsTheReferenceArms) {
  const PaddedParityCase& c = GetParam();
  testing::RecipeBuilder builder = Padded(c.pp > 1 ? 4 : 3, c.mtp_layers);
  builder.Set("precision.recipe", c.precision).Set("model.dispatcher", "flex");
  if (c.dropout) builder.Set("model.dropout", 0.1).Set("model.attention_dropout", 0.1);
  builder.ParityArms(testing::RecomputeOverride(c.recompute));
  if (c.pp > 1) builder.TwoChunkPipeline(c.pp);
  testing::ExpectOverlapEqualsReferences(builder.Build(c.name + ".toml"));
}

INSTANTIATE_TEST_SUITE_P(
    Configurations, PaddedParityTest,
    ::testing::Values(PaddedParityCase{"mtp0_none_fp32", 0, "none", "fp32"},
                      PaddedParityCase{"mtp0_uniform2_bf16_dropout", 0, "uniform-2", "bf16", true},
                      PaddedParityCase{"mtp1_uniform1_fp32_dropout", 1, "uniform-1", "fp32", true},
                      PaddedParityCase{"mtp1_block1_bf16", 1, "block-1", "bf16"},
                      PaddedParityCase{"mtp1_block2_fp32", 1, "block-2", "fp32"},
                      PaddedParityCase{"mtp1_block3_bf16_dropout", 1, "block-3", "bf16", true},
                      PaddedParityCase{"pp2_vpp2_mtp1_uniform1_bf16_dropout", 1, "uniform-1",
                                       "bf16", true, 2}),
    [](const ::testing::TestParamInfo<PaddedParityCase>& info) { return info.param.name; });

// The segment snapshot, one field left out of the restore at a time (snapshot_skips_<field>),
// with mHC on so that the bridge field is live too.
class SnapshotFieldTest : public ::testing::TestWithParam<ChunkStateField> {};

TEST_P(SnapshotFieldTest, AReplayThatSkipsTheFieldIsCaught) {
  const ChunkStateField field = GetParam();
  const Recipe recipe = Padded(3, 1)
                            .Set("model.mhc_streams", int64_t{2})
                            .Set("model.mhc_sinkhorn_iterations", int64_t{4})
                            .Set("train.iterations", int64_t{2})
                            .Set("precision.recipe", "fp32")
                            .ParityArms(testing::FullRecompute("uniform", 1))
                            .Build("snapshot.toml");
  testing::ThreadTrainOptions options;
  options.bugs.overlap.snapshot_skips[Index(field)] = true;
  options.timeout = std::chrono::seconds(20);
  const testing::RankRecords reference = testing::TrainOnThreads(recipe, "reference");
  if (field == ChunkStateField::kMhcMultistream) {
    // The replayed MTP depth finds the bridge the last MTP post-process cleared: the run stops
    // with a message that says so.
    try {
      testing::TrainOnThreads(recipe, "overlap", options);
      ADD_FAILURE() << "the run without the bridge completed";
    } catch (const std::exception& e) {
      std::printf("snapshot skips mhc_multistream: %s\n", e.what());
      EXPECT_NE(std::string(e.what()).find("mHC streams"), std::string::npos) << e.what();
    }
    return;
  }
  const testing::RankRecords buggy = testing::TrainOnThreads(recipe, "overlap", options);
  const std::string difference = testing::FirstDifference(reference, buggy);
  const std::vector<std::string> differing = testing::DifferingGrads(reference, buggy, 1, 0);
  std::string names;
  for (const std::string& name : differing) names += (names.empty() ? "" : ", ") + name;
  std::printf("snapshot skips %s: %zu parameters differ at iteration 1 on rank 0: %s\n",
              ToString(field), differing.size(), names.c_str());
  if (field == ChunkStateField::kMtpHiddenStates) {
    // With one MTP depth (the overlap arm's limit) the list is empty between passes and the MTP
    // attn node refills it from its input at every pass: a replay reads nothing stale from it.
    EXPECT_EQ(difference, "");
    return;
  }
  ASSERT_NE(difference, "");
  if (field == ChunkStateField::kPaddingMask) {
    // The replayed routers read the rolled mask: the MoE losses they record name it first.
    EXPECT_NE(difference.find("aux_loss"), std::string::npos) << difference;
  }
  // The replay runs after the loss: iteration 1's losses are the first pass's, right; the
  // gradients are wrong.
  for (const char* loss : {"iteration 1, rank 0: loss", "iteration 1, rank 0: lm_loss",
                           "iteration 1, rank 0: mtp_loss"}) {
    EXPECT_EQ(difference.find(loss), std::string::npos) << difference;
  }
  auto differs = [&](const std::string& prefix) {
    return std::any_of(differing.begin(), differing.end(),
                       [&](const std::string& name) { return name.rfind(prefix, 0) == 0; });
  };
  // The MTP depth's replay rolls the field a second time, and the decoder segments replayed
  // after it read the rolled field (ids are read by the MTP embedding only).
  EXPECT_TRUE(differs("mtp.0.")) << names;
  if (field != ChunkStateField::kInputIds) {
    EXPECT_TRUE(differs("layers.0.")) << names;
  }
}

INSTANTIATE_TEST_SUITE_P(Fields, SnapshotFieldTest, ::testing::ValuesIn(kChunkStateFields),
                         [](const ::testing::TestParamInfo<ChunkStateField>& info) {
                           return std::string(ToString(info.param));
                         });

}  // namespace
}  // namespace bitparity

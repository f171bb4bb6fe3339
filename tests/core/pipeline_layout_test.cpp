// Megatron's --pipeline-model-parallel-layout as bitparity reads it: the syntax, where each stage
// lands (chunk-major virtual order), the layer offsets, the rules with their messages, and the
// even split without a layout. The expected placements are Megatron's own for the same strings.

#include "schedule/pipeline_layout.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/errors.h"

namespace bitparity {
namespace {

std::string ErrorOf(const std::string& text, int64_t pp, int64_t layers, int64_t mtp) {
  try {
    ParsePipelineLayout(text, pp, layers, mtp);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(PipelineLayout, ExpandsRepetitionsAsMegatronDoes) {
  EXPECT_EQ(ExpandPipelineLayout("xy(ab|cd|ef)*2,pq"), "xyab|cd|efab|cd|efpq");
  EXPECT_EQ(ExpandPipelineLayout("ab,(cd|)*2"), "abcd|cd|");
  EXPECT_EQ(ExpandPipelineLayout("(|ab)*2,cd"), "|ab|abcd");
  EXPECT_EQ(ExpandPipelineLayout("Et*3|(tt|)*2,m|L"), "Ettt|tt|tt|m|L");
  EXPECT_EQ(ExpandPipelineLayout("t*0L"), "L");
  EXPECT_THROW(ExpandPipelineLayout("((t|)*2)*2"), InputError);
  EXPECT_THROW(ExpandPipelineLayout("E(t|"), InputError);
  EXPECT_THROW(ExpandPipelineLayout("t*99999999"), InputError);
}

// The seed's MTP configuration: 8 stages over 4 ranks, layer 7, MTP and the loss on rank 3.
TEST(PipelineLayout, SeedMtpLayoutPlacesStagesChunkMajor) {
  const PipelineLayout layout = ParsePipelineLayout("Et|(t|)*6tmL", 4, 8, 1);
  EXPECT_EQ(layout.vpp, 2);
  ASSERT_EQ(layout.stages.size(), 8u);
  for (const PipelineStage& s : layout.stages) {
    EXPECT_EQ(s.pp_rank, s.index % 4);
    EXPECT_EQ(s.chunk, s.index / 4);
    EXPECT_EQ(s.first_layer, s.index) << "stage " << s.index;
    EXPECT_EQ(s.layers, 1);
  }
  EXPECT_TRUE(layout.stage(0, 0).embedding);
  const PipelineStage& last = layout.stage(3, 1);
  EXPECT_TRUE(last.loss);
  EXPECT_EQ(last.mtp_layers, 1);
  EXPECT_TRUE(last.final_norm);  // the last decoder layer's stage, with MTP
  EXPECT_EQ(layout.Text(), "Et|t|t|t|t|t|t|tmL");
  EXPECT_EQ(layout.Describe(),
            (std::vector<std::string>{"rank 0: [E t0] [t4]", "rank 1: [t1] [t5]",
                                      "rank 2: [t2] [t6]", "rank 3: [t3] [t7 m0 L]"}));
}

// DeepSeek-V3's layout: an MTP-only stage on rank 14 and a loss-only stage on rank 15.
TEST(PipelineLayout, StagesWithoutDecoderLayersAreKept) {
  const PipelineLayout layout = ParsePipelineLayout("Et*3|(tt|)*29,m|L", 16, 61, 1);
  EXPECT_EQ(layout.vpp, 2);
  EXPECT_EQ(layout.stage(0, 0).layers, 3);
  EXPECT_EQ(layout.stage(0, 1).first_layer, 33);
  EXPECT_EQ(layout.stage(15, 0).first_layer, 31);
  const PipelineStage& mtp = layout.stage(14, 1);
  EXPECT_EQ(mtp.layers, 0);
  EXPECT_EQ(mtp.mtp_layers, 1);
  EXPECT_FALSE(mtp.final_norm);
  EXPECT_TRUE(layout.stage(13, 1).final_norm);  // holds layers 59, 60
  const PipelineStage& loss = layout.stage(15, 1);
  EXPECT_EQ(loss.layers, 0);
  EXPECT_TRUE(loss.loss);
}

// Under mHC the streams (n x hidden) cross the boundaries up to the final norm's stage, hidden
// states after it; with MTP that stage is MTP depth 0's.
TEST(PipelineLayout, UnderMhcTheFinalNormIsOnTheMtpStageAndTheStreamsCrossUpToIt) {
  const PipelineLayout plain = ParsePipelineLayout("Et*3|(tt|)*29,m|L", 16, 61, 1);
  const PipelineLayout layout = WithFinalNormOnTheMtpStage(plain);
  EXPECT_FALSE(layout.stage(13, 1).final_norm);
  EXPECT_TRUE(layout.stage(14, 1).final_norm);  // the MTP-only stage
  int64_t final_norms = 0;
  for (const PipelineStage& s : layout.stages) final_norms += s.final_norm ? 1 : 0;
  EXPECT_EQ(final_norms, 1);
  const int64_t mtp = layout.stage(14, 1).index;
  EXPECT_EQ(layout.ActivationWidth(mtp, 8, 32), 32);     // streams into the MTP stage
  EXPECT_EQ(layout.ActivationWidth(mtp + 1, 8, 32), 8);  // hidden states out of it
  EXPECT_EQ(plain.ActivationWidth(mtp, 8, 32), 8);       // without the move: normed before it
  // The MTP depth on the last decoder layer's stage: nothing moves.
  const PipelineLayout seed = ParsePipelineLayout("Et|(t|)*6tmL", 4, 8, 1);
  EXPECT_EQ(WithFinalNormOnTheMtpStage(seed).Text(), seed.Text());
  EXPECT_TRUE(WithFinalNormOnTheMtpStage(seed).stage(3, 1).final_norm);
  // Without MTP the loss stage keeps it.
  EXPECT_TRUE(WithFinalNormOnTheMtpStage(EvenPipelineLayout(2, 2, 8, 0)).stage(1, 1).final_norm);
}

// Megatron's validate_layer_layout keeps MTP off pipeline rank 0 only in its chunks before the
// last; in rank 0's last chunk it reads the rank's own embedding.
TEST(PipelineLayout, MtpInRankZerosLastChunkIsAccepted) {
  for (const char* text : {"Et|t|tm|L", "Et|t|m|L"}) {
    const int64_t layers = std::string(text) == "Et|t|tm|L" ? 3 : 2;
    const PipelineLayout layout = ParsePipelineLayout(text, 2, layers, 1);
    EXPECT_EQ(layout.stage(0, 1).mtp_layers, 1) << text;
    EXPECT_TRUE(layout.stage(1, 1).loss) << text;
  }
}

TEST(PipelineLayout, EvenSplitIsMegatronsDefault) {
  // Megatron's comment: 8 layers, 2 stages, 2 virtual stages: rank 0 [0, 1] [4, 5], rank 1
  // [2, 3] [6, 7].
  const PipelineLayout layout = EvenPipelineLayout(2, 2, 8, 0);
  EXPECT_EQ(layout.Describe(),
            (std::vector<std::string>{"rank 0: [E t0 t1] [t4 t5]", "rank 1: [t2 t3] [t6 t7 L]"}));
  EXPECT_TRUE(layout.stage(1, 1).final_norm);
  EXPECT_EQ(layout.Text(), ParsePipelineLayout("Ett|(tt|)*2ttL", 2, 8, 0).Text());
  EXPECT_EQ(EvenPipelineLayout(1, 1, 3, 1).Text(), "EtttmL");
}

TEST(PipelineLayout, AnUnevenSplitSaysHowToFixIt) {
  try {
    EvenPipelineLayout(2, 2, 6, 1);
    FAIL() << "6 layers over 4 stages were accepted";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()),
              "[model] layers = 6 does not split evenly over [parallel] pp x vpp = 2 x 2 = 4 "
              "stages; make layers a multiple of 4 or place the layers with [model] "
              "pipeline_layout, e.g. \"Ett|tt|t|tmL\"");
  }
  // The suggestion is itself a valid layout.
  EXPECT_NO_THROW(ParsePipelineLayout("Ett|tt|t|tmL", 2, 6, 1));
}

// Each rule of the layout with its message: (layout, pp, layers, mtp_layers, message).
struct LayoutRule {
  std::string text;
  int64_t pp, layers, mtp_layers;
  std::string message;
};

TEST(PipelineLayout, EveryRuleHasItsMessage) {
  const std::vector<LayoutRule> rules = {
      {"Et|t|tL", 2, 3, 0,
       "\"Et|t|tL\" has 3 stages, not a multiple of [parallel] pp = 2 (the stages are the "
       "model chunks of every pipeline rank, chunk 0 of each rank first: pp x vpp of them)"},
      {"Etx|tL", 2, 2, 0,
       "\"Etx|tL\" has an unknown letter 'x' in stage 0 (\"Etx\"); the letters are E "
       "(embedding), t (decoder layer), m (MTP layer), L (loss), with '|' between stages"},
      {"EEt|tL", 2, 2, 0,
       "\"EEt|tL\" has 'E' twice (again in stage 0 (\"EEt\")): the model has one embedding, "
       "first in the first stage"},
      {std::string("Et\0|tL", 6), 2, 2, 0,
       "\"Et\\x00|tL\" has an unknown letter \"\\x00\" (a control character) in stage 0 "
       "(\"Et\\x00\"); the letters are E (embedding), t (decoder layer), m (MTP layer), L "
       "(loss), with '|' between stages"},
      {"Et\xc2\xa0|tL", 2, 2, 0,
       "\"Et\xc2\xa0|tL\" has an unknown letter U+00A0 (not an ASCII letter) in stage 0 "
       "(\"Et\xc2\xa0\"); the letters are E (embedding), t (decoder layer), m (MTP layer), L "
       "(loss), with '|' between stages"},
      // A long layout is shown cut, with its length.
      {"Et|" + std::string(100, 'x') + "tL", 2, 2, 0,
       "\"Et|" + std::string(57, 'x') +
           "...\" (105 characters) has an unknown letter 'x' in "
           "stage 1 (\"" +
           std::string(60, 'x') +
           "...\" (102 characters)); the letters are E "
           "(embedding), t (decoder layer), m (MTP layer), L (loss), with '|' between stages"},
      {"t|EtL", 2, 2, 0,
       "\"t|EtL\" has 'E' in stage 1 (\"EtL\"): the embedding comes first in the first stage"},
      {"EtL|t", 2, 2, 0,
       "\"EtL|t\" has 'L' in stage 0 (\"EtL\"): the loss comes last in the last stage"},
      {"t|tL", 2, 2, 0, "\"t|tL\" must hold 'E' (the embedding) once, first in the first stage"},
      {"Et|t", 2, 2, 0, "\"Et|t\" must hold 'L' (the loss) once, last in the last stage"},
      {"Et|tL", 2, 3, 0, "\"Et|tL\" has 2 decoder layers 't', but [model] layers = 3"},
      {"Et|tL", 2, 2, 1, "\"Et|tL\" has 0 MTP layers 'm', but [model] mtp_layers = 1"},
      {"Et|mtL", 2, 2, 1,
       "\"Et|mtL\" has a decoder layer 't' after an MTP layer 'm' in stage 1 (\"mtL\"): "
       "decoder layers come before MTP layers"},
      {"Et|tm|m|L", 2, 2, 2,
       "\"Et|tm|m|L\" spreads its MTP layers over 2 stages: every 'm' must be in one stage"},
      {"Et|tm||L", 2, 2, 1,
       "\"Et|tm||L\" has MTP layers in chunk 0 of pipeline rank 1: they must be in a rank's "
       "last chunk (1)"},
  };
  for (const LayoutRule& r : rules) {
    EXPECT_EQ(ErrorOf(r.text, r.pp, r.layers, r.mtp_layers), r.message) << r.text;
  }
}

}  // namespace
}  // namespace bitparity

// The parameters the model builds: ParameterCount (what `bitparity validate` prints) is the sum
// of what BuildGptWeights registers, with and without mHC and MTP; mHC's parameters are fp32
// and start where its formulas say.

#include "model/parameters.h"

#include <gtest/gtest.h>

#include <string>

#include "comm/rank_context.h"
#include "config/recipe.h"

namespace bitparity {
namespace {

// A small model: 16 wide, 2 heads, MTP depths and mHC streams as given.
ModelConfig SmallConfig(int64_t layers, int64_t mtp_layers, int64_t mhc_streams) {
  ModelConfig config;
  config.hidden = 16;
  config.heads = 2;
  config.layers = layers;
  config.moe_ffn = 8;
  config.ffn = 24;
  config.vocab = 32;
  config.mtp_layers = mtp_layers;
  config.mhc_streams = mhc_streams;
  return config;
}

int64_t Registered(const ModelConfig& config, ParameterStore* store) {
  BuildGptWeights(config, ParallelLayout::Make(0, 1, 1, config.experts), store);
  int64_t count = 0;
  for (const Parameter& p : store->all()) count += p.master.numel();
  return count;
}

TEST(Parameters, CountIsWhatTheModelRegisters) {
  for (int64_t mtp : {0, 1}) {
    for (int64_t streams : {0, 4}) {
      const ModelConfig config = SmallConfig(3, mtp, streams);
      ParameterStore store(at::kBFloat16, 1);
      EXPECT_EQ(ParameterCount(config), Registered(config, &store))
          << "mtp " << mtp << ", streams " << streams;
    }
  }
}

TEST(Parameters, MhcParametersAreFp32AndStartAtTheirInit) {
  ModelConfig config = SmallConfig(2, 1, 4);
  config.mhc_init_gating_factor = 0.25;
  ParameterStore store(at::kBFloat16, 1);
  const GptWeights w =
      BuildGptWeights(config, ParallelLayout::Make(0, 1, 1, config.experts), &store);
  const MhcWeights& m = w.layers[1].mlp_mhc;
  EXPECT_EQ(m.mapping.scalar_type(), at::kFloat);
  EXPECT_EQ(m.mapping.sizes(), (std::vector<int64_t>{24, 64}));
  EXPECT_EQ(m.alpha_res.item<float>(), 0.25f);
  EXPECT_EQ(m.bias.abs().sum().item<float>(), 0.0f);
  EXPECT_EQ(m.alpha_pre.scalar_type(), at::kFloat);
  EXPECT_FALSE(w.mtp[0].eh_proj.defined());
  EXPECT_EQ(w.mtp[0].h_proj.scalar_type(), at::kBFloat16);
}

}  // namespace
}  // namespace bitparity

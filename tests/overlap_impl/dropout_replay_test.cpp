// Dropout that replays. Each mask is a pure function of (seed, iteration, DP rank, microbatch,
// layer, site), so with hidden and attention dropout on:
// - every mask a recompute replay draws equals the one its first pass drew (the differing
//   elements are counted: 0), and every arm draws the same mask for the same key;
// - the overlap arm equals the reference arm bit for bit under every recompute setting, and both
//   equal the reference without recompute, with and without a pipeline.

#include <gtest/gtest.h>

#include <map>
#include <ostream>
#include <string>
#include <vector>

#include "config/recipe.h"
#include "model/ops.h"
#include "tests/support/recipe_builder.h"
#include "tests/support/thread_trainer.h"

namespace bitparity {
namespace {

// Every mask one rank drew, in drawing order per key.
class MaskLog : public ops::DropoutMaskObserver {
 public:
  void Observe(uint64_t key, const at::Tensor& mask) override {
    draws[key].push_back(mask.clone());
  }
  std::map<uint64_t, std::vector<at::Tensor>> draws;
};

int64_t DifferingElements(const at::Tensor& a, const at::Tensor& b) {
  if (!a.sizes().equals(b.sizes())) return std::max(a.numel(), b.numel());
  return (a != b).sum().item<int64_t>();
}

// Trains `arm` with a mask log on every rank.
std::vector<MaskLog> TrainLogged(const Recipe& recipe, const std::string& arm) {
  std::vector<MaskLog> logs(static_cast<size_t>(recipe.world_size()));
  testing::ThreadTrainOptions options;
  options.on_trainer = [&logs](int64_t rank, Trainer&) {
    ops::SetDropoutMaskObserver(&logs[static_cast<size_t>(rank)]);
  };
  testing::TrainOnThreads(recipe, arm, options);
  return logs;
}

testing::RecipeBuilder WithDropout(int layers, int mtp_layers) {
  testing::RecipeBuilder builder(layers, mtp_layers);
  builder.Set("model.dropout", 0.1).Set("model.attention_dropout", 0.2).Set("train.lr", 1e-2);
  return builder;
}

TEST(DropoutReplay, EveryReplayedMaskEqualsItsFirstDrawInEveryArm) {
  const Recipe recipe = WithDropout(3, 1)
                            .Set("model.dispatcher", "flex")
                            .Set("precision.recipe", "bf16")
                            .ParityArms(testing::FullRecompute("uniform", 1))
                            .Build("dropout_masks.toml");
  const std::vector<MaskLog> none = TrainLogged(recipe, "reference_none");
  for (const char* arm : {"reference", "overlap"}) {
    SCOPED_TRACE(arm);
    const std::vector<MaskLog> logs = TrainLogged(recipe, arm);
    ASSERT_EQ(logs.size(), none.size());
    for (size_t rank = 0; rank < logs.size(); ++rank) {
      const auto& draws = logs[rank].draws;
      const auto& reference_draws = none[rank].draws;
      ASSERT_EQ(draws.size(), reference_draws.size()) << "rank " << rank << ": the same keys";
      int64_t replayed = 0, differing = 0, elements = 0;
      for (const auto& [key, masks] : draws) {
        ASSERT_EQ(reference_draws.count(key), 1u) << "rank " << rank << ": key " << key;
        const at::Tensor& first = reference_draws.at(key).front();
        ASSERT_EQ(reference_draws.at(key).size(), 1u) << "no recompute: one draw per key";
        replayed += masks.size() > 1 ? 1 : 0;
        for (const at::Tensor& mask : masks) {
          differing += DifferingElements(mask, first);
          elements += mask.numel();
        }
      }
      EXPECT_EQ(differing, 0) << "rank " << rank << ": of " << elements << " mask elements";
      // Three decoder layers and the MTP layer, each replayed: their masks were drawn twice.
      EXPECT_GT(replayed, 0) << "rank " << rank << ": the recompute replayed nothing";
    }
  }
  // The count sees a difference: two keys' masks of one shape differ.
  const auto& draws = none[0].draws;
  const at::Tensor& a = draws.begin()->second.front();
  for (auto it = std::next(draws.begin()); it != draws.end(); ++it) {
    if (it->second.front().sizes().equals(a.sizes())) {
      EXPECT_GT(DifferingElements(a, it->second.front()), 0);
      return;
    }
  }
  ADD_FAILURE() << "no two masks of one shape";
}

struct DropoutParityCase {
  std::string name;
  int mtp_layers;
  std::string method;
  int num_layers;
  std::string dispatcher;
  std::string precision;
  int pp = 1;  // with pp > 1: vpp 2, 4 layers
};

void PrintTo(const DropoutParityCase& c, std::ostream* os) { *os << c.name; }

class DropoutParityTest : public ::testing::TestWithParam<DropoutParityCase> {};

TEST_P(DropoutParityTest, OverlapEqualsTheReferenceArms) {
  const DropoutParityCase& c = GetParam();
  testing::RecipeBuilder builder = WithDropout(c.pp > 1 ? 4 : 3, c.mtp_layers);
  builder.Set("model.dispatcher", c.dispatcher)
      .Set("precision.recipe", c.precision)
      .ParityArms(testing::FullRecompute(c.method, c.num_layers));
  if (c.pp > 1) builder.TwoChunkPipeline(c.pp);
  testing::ExpectOverlapEqualsReferences(builder.Build(c.name + ".toml"));
}

INSTANTIATE_TEST_SUITE_P(
    Configurations, DropoutParityTest,
    ::testing::Values(DropoutParityCase{"mtp0_uniform1_fp32", 0, "uniform", 1, "alltoall", "fp32"},
                      DropoutParityCase{"mtp0_uniform2_bf16", 0, "uniform", 2, "flex", "bf16"},
                      DropoutParityCase{"mtp1_block1_fp32", 1, "block", 1, "flex", "fp32"},
                      DropoutParityCase{"mtp1_block3_bf16", 1, "block", 3, "alltoall", "bf16"},
                      DropoutParityCase{"pp2_vpp2_mtp1_uniform1_bf16", 1, "uniform", 1, "flex",
                                        "bf16", 2}),
    [](const ::testing::TestParamInfo<DropoutParityCase>& info) { return info.param.name; });

}  // namespace
}  // namespace bitparity

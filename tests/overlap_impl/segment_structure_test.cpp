// After a microbatch's forward, every node inside a recompute segment holds no inputs, outputs
// or side tensors while every segment holds its input (gradient parity alone cannot see a
// segment that silently kept its graph); after its backward nothing at all is retained.

#include <gtest/gtest.h>

#include <mutex>

#include "config/recipe.h"
#include "overlap_impl/overlap_engine.h"
#include "tests/support/recipe_builder.h"
#include "tests/support/test_support.h"
#include "tests/support/thread_trainer.h"

namespace bitparity {
namespace {

std::string RecipeText(const std::string& recompute) {
  return testing::RecipeBuilder(3, 1)
      .Set("train.iterations", 1)
      .Arm("overlap", "overlap", "recompute = " + recompute)
      .Text();
}

struct Violations {
  std::mutex mutex;
  std::vector<std::string> found;
  int checked_forward = 0;
  int checked_backward = 0;
  void Add(const std::string& v) {
    std::lock_guard<std::mutex> lock(mutex);
    found.push_back(v);
  }
};

void InstallChecks(Trainer& trainer, Violations* v) {
  auto* engine = dynamic_cast<OverlapEngine*>(&trainer.engine());
  ASSERT_NE(engine, nullptr);
  const CombinedStepPlan& plan = engine->plan();
  engine->after_op = [v, &plan](size_t, const NodeOp& op,
                                std::vector<std::unique_ptr<ChunkSchedule>>& chunks) {
    ChunkSchedule& chunk =
        *chunks[static_cast<size_t>(op.chunk * plan.microbatches + op.microbatch)];
    const std::string mb = "microbatch " + std::to_string(op.microbatch);
    if (op.node == NodeKind::kChunk && op.phase == Phase::kReleaseActivations) {
      for (size_t s = 0; s < chunk.segment_count(); ++s) {
        const LayerSegment& spec = chunk.segment(s).spec();
        if (!chunk.segment(s).holds_input())
          v->Add(mb + ": segment " + std::to_string(s) + " lost its input after the forward");
        for (int64_t l = spec.first_layer; l <= spec.last_layer(); ++l) {
          if (chunk.layer(l).holds_tensors()) {
            v->Add(mb + ": recomputed layer " + std::to_string(l) +
                   " holds tensors after the forward");
          }
        }
      }
      std::lock_guard<std::mutex> lock(v->mutex);
      ++v->checked_forward;
    }
    if (op.node == NodeKind::kChunk && op.phase == Phase::kFlushGrads) {
      if (chunk.holds_tensors()) v->Add(mb + ": nodes hold tensors after the backward");
      for (size_t s = 0; s < chunk.segment_count(); ++s) {
        if (chunk.segment(s).holds_input()) {
          v->Add(mb + ": segment " + std::to_string(s) + " holds its input after the backward");
        }
      }
      std::lock_guard<std::mutex> lock(v->mutex);
      ++v->checked_backward;
    }
  };
}

class SegmentStructureTest : public ::testing::TestWithParam<std::string> {};

TEST_P(SegmentStructureTest, RecomputedNodesHoldNothingBetweenForwardAndBackward) {
  Recipe recipe = ParseRecipe(RecipeText(GetParam()), "structure.toml");
  Violations violations;
  testing::ThreadTrainOptions options;
  options.on_trainer = [&](int64_t, Trainer& trainer) { InstallChecks(trainer, &violations); };
  testing::TrainOnThreads(recipe, "overlap", options);
  EXPECT_TRUE(violations.found.empty()) << violations.found.front();
  // 2 ranks x 3 microbatches, each checked after its forward and after its backward.
  EXPECT_EQ(violations.checked_forward, 6);
  EXPECT_EQ(violations.checked_backward, 6);
}

INSTANTIATE_TEST_SUITE_P(
    Recompute, SegmentStructureTest,
    ::testing::Values("{ granularity = \"full\", method = \"uniform\", num_layers = 1 }",
                      "{ granularity = \"full\", method = \"block\", num_layers = 1 }",
                      "{ granularity = \"full\", method = \"block\", num_layers = 3 }",
                      "{ granularity = \"full\", unit = \"chunk\" }"),
    [](const ::testing::TestParamInfo<std::string>& info) {
      return std::string(info.param.find("chunk") != std::string::npos     ? "chunk"
                         : info.param.find("uniform") != std::string::npos ? "uniform1"
                         : info.param.find("= 1") != std::string::npos     ? "block1"
                                                                           : "block3");
    });

}  // namespace
}  // namespace bitparity

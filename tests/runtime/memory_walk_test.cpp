// The memory model's walk of every schedule it knows balances: each pass releases what it added,
// so after the last pass of an iteration the walk is back at its start, for both arms, with and
// without a pipeline (even, uneven, empty, MTP-only and loss-only stages), with and without MTP,
// under every recompute setting. A probe of made-up sizes, each a different power of two, makes
// any unbalanced term visible.

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "config/recipe.h"
#include "runtime/memory_model.h"
#include "schedule/pipeline_layout.h"

namespace bitparity {
namespace {

MemoryProbe MadeUpProbe(int64_t layers, int64_t mtp_layers) {
  MemoryProbe p;
  p.input_bytes = 1 << 10;
  p.input_width = ModelConfig().hidden;  // the walks' models: hidden states, no mHC
  p.embedding_retained = 1 << 11;
  p.embedding_grad_bytes = 1 << 12;
  for (int64_t l = 0; l < layers + mtp_layers; ++l) {
    LayerMemory m;
    m.retained = (1 << 14) + (l << 3);
    m.forward_transient = 1 << 13;
    m.forward_transient_no_grad = 1 << 15;
    m.backward_transient = 1 << 16;
    m.grad_bytes = (1 << 17) + (l << 4);
    m.node_boundary_bytes = 1 << 22;
    m.attn_wgrad_held = 1 << 23;
    m.attn_wgrad_grad_bytes = 1 << 8;  // of grad_bytes
    m.mlp_wgrad_held = 1 << 24;
    m.mlp_wgrad_grad_bytes = 1 << 7;
    p.layers.push_back(m);
  }
  p.post_retained = 1 << 18;
  p.post_forward_transient = 1 << 19;
  p.post_backward_transient = 1 << 20;
  p.post_grad_bytes = 1 << 21;
  p.reduction_transient = 1 << 9;
  return p;
}

ArmConfig Arm(EngineKind engine, const std::string& recompute) {
  ArmConfig arm;
  arm.name = recompute;
  arm.engine = engine;
  if (recompute == "none") return arm;
  arm.recompute.granularity = RecomputeGranularity::kFull;
  if (recompute == "chunk") {
    arm.recompute.unit = RecomputeUnit::kChunk;
    return arm;
  }
  arm.recompute.method_set = true;
  arm.recompute.method = recompute[0] == 'u' ? RecomputeMethod::kUniform : RecomputeMethod::kBlock;
  arm.recompute.num_layers = recompute.back() - '0';
  return arm;
}

struct WalkCase {
  int64_t pp;
  int64_t vpp;
  int64_t layers;
  int64_t mtp_layers;
  std::string layout;  // "": the even split
};

TEST(MemoryWalk, EveryPassReleasesWhatItAdded) {
  const std::vector<WalkCase> cases = {{1, 1, 3, 0, ""},
                                       {1, 1, 3, 1, ""},
                                       {2, 1, 4, 0, ""},
                                       {2, 2, 4, 0, ""},
                                       {2, 2, 4, 1, ""},
                                       {2, 2, 4, 1, "Et|tt||tmL"},
                                       {2, 3, 4, 0, "Et|t|t||t|L"},
                                       {4, 2, 4, 1, "Et|t|t|t|||m|L"},
                                       {2, 2, 4, 1, "Et|tt|t|mL"},
                                       {2, 2, 3, 1, "Et|t|tm|L"}};
  int walked = 0;
  for (const WalkCase& c : cases) {
    ModelConfig model;
    model.layers = c.layers;
    model.mtp_layers = c.mtp_layers;
    model.first_k_dense = 1;
    const PipelineLayout pipeline =
        c.layout.empty() ? EvenPipelineLayout(c.pp, c.vpp, c.layers, c.mtp_layers)
                         : ParsePipelineLayout(c.layout, c.pp, c.layers, c.mtp_layers);
    const MemoryProbe probe = MadeUpProbe(c.layers, c.mtp_layers);
    for (EngineKind engine : {EngineKind::kReference, EngineKind::kOverlap}) {
      // The overlap arm with a pipeline needs model chunks; the reference arm's chunk unit is
      // refused with a pipeline.
      if (engine == EngineKind::kOverlap && c.pp > 1 && pipeline.vpp == 1) continue;
      for (const std::string recompute :
           {"none", "uniform1", "uniform2", "block1", "block3", "chunk"}) {
        if (c.mtp_layers > 0 && recompute == "uniform2") continue;
        if (recompute == "chunk" && engine == EngineKind::kReference && c.pp > 1) continue;
        for (bool delay_wgrad : {false, true}) {
          if (delay_wgrad && engine == EngineKind::kReference) continue;
          ArmConfig arm = Arm(engine, recompute);
          arm.delay_wgrad = delay_wgrad;
          for (int64_t rank = 0; rank < c.pp; ++rank) {
            const MemoryPrediction prediction =
                PredictPeak(probe, arm, model, pipeline, rank, /*microbatches=*/4, 0);
            const std::string name = std::string(ToString(engine)) + " " + recompute +
                                     (delay_wgrad ? " delay_wgrad" : "") + " pp " +
                                     std::to_string(c.pp) + " \"" + pipeline.Text() + "\" rank " +
                                     std::to_string(rank);
            EXPECT_EQ(prediction.unreleased_bytes, 0) << name;
            EXPECT_GT(prediction.peak_bytes, 0) << name;
            ++walked;
          }
        }
      }
    }
  }
  EXPECT_GT(walked, 100);
}

// With delayed weight gradients the peak counts what they hold: on one rank without a pipeline,
// each layer's mlp node keeps its pending gradients over the dispatch's backward, so the peak of
// the delay_wgrad arm lies above the same arm's without delay by about what they hold.
TEST(MemoryWalk, DelayedWeightGradientsRaiseThePeakByWhatTheyHold) {
  ModelConfig model;
  model.layers = 3;
  model.first_k_dense = 1;
  const PipelineLayout pipeline = EvenPipelineLayout(1, 1, 3, 0);
  MemoryProbe probe = MadeUpProbe(3, 0);
  ArmConfig arm = Arm(EngineKind::kOverlap, "none");
  const int64_t eager = PredictPeak(probe, arm, model, pipeline, 0, 4, 0).peak_bytes;
  arm.delay_wgrad = true;
  const int64_t delayed = PredictPeak(probe, arm, model, pipeline, 0, 4, 0).peak_bytes;
  const LayerMemory& layer = probe.layers[0];
  EXPECT_GE(delayed - eager, layer.mlp_wgrad_held - layer.grad_bytes - layer.backward_transient);
  for (LayerMemory& m : probe.layers) m.mlp_wgrad_held = m.attn_wgrad_held = 0;
  EXPECT_LE(PredictPeak(probe, arm, model, pipeline, 0, 4, 0).peak_bytes, eager);
}

}  // namespace
}  // namespace bitparity

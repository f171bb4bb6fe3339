// CPU tensor accounting: it sees the activations autograd saves (the peak grows with the number
// of layers that keep theirs), it returns to the same level at the end of every iteration (no
// leak across iterations), and it sees oneDNN's scratchpads and reorder buffers, which ideep
// allocates through the c10 CPU allocator ("attr-scratchpad:user" in oneDNN's verbose output).
// Whether a bf16 GEMM takes a scratchpad depends on the CPU (this one computes it in the BLAS).

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "comm/communicator.h"
#include "config/recipe.h"
#include "core/memory.h"
#include "runtime/memory_model.h"
#include "runtime/trainer.h"

namespace bitparity {
namespace {

std::string RecipeText(int layers, const std::string& recompute) {
  return R"(
[model]
hidden = 64
heads = 4
layers = )" +
         std::to_string(layers) + R"(
first_k_dense = 1
experts = 4
topk = 2
moe_ffn = 64
ffn = 128
vocab = 64
seq_len = 64
[train]
micro_batch = 2
global_batch = 4
iterations = 3
[arms.a]
engine = "reference"
recompute = )" +
         recompute + "\n";
}

struct Measured {
  int64_t static_bytes = 0;
  std::vector<IterationRecord> records;
};

Measured Train(int layers, const std::string& recompute) {
  MemoryTracker::Install();
  Recipe recipe = ParseRecipe(RecipeText(layers, recompute), "memory.toml");
  Trainer trainer(recipe, recipe.arm("a"), ParallelLayout::Make(0, 1, 1, 4), Communicator::Local());
  Measured m;
  m.static_bytes = MemoryTracker::current_bytes();
  for (int64_t it = 1; it <= 3; ++it) m.records.push_back(trainer.RunIteration(it, nullptr));
  return m;
}

const char kNone[] = "{ granularity = \"none\" }";

TEST(MemoryAccounting, SeesSavedActivationsGrowWithLayers) {
  Measured two = Train(2, kNone);
  Measured four = Train(4, kNone);
  const int64_t activations_two = two.records.back().peak_bytes - two.static_bytes;
  const int64_t activations_four = four.records.back().peak_bytes - four.static_bytes;
  EXPECT_GT(activations_two, 0);
  EXPECT_GT(activations_four, activations_two + activations_two / 2)
      << "two more layers keeping their activations should raise the peak";
  // Recompute keeps far less than the whole graph.
  Measured recomputed =
      Train(4, "{ granularity = \"full\", method = \"uniform\", num_layers = 1 }");
  EXPECT_LT(recomputed.records.back().peak_bytes - recomputed.static_bytes, activations_four);
}

TEST(MemoryAccounting, ReturnsToTheSameLevelAfterEveryIteration) {
  Measured m = Train(3, "{ granularity = \"full\", method = \"uniform\", num_layers = 1 }");
  EXPECT_EQ(m.records[0].end_bytes, m.records[1].end_bytes);
  EXPECT_EQ(m.records[1].end_bytes, m.records[2].end_bytes);
  EXPECT_EQ(m.records[2].end_bytes, m.static_bytes) << "nothing may outlive an iteration";
}

// Bytes the tracker saw at the peak of `op` beyond what was live before it, after a warm-up call.
template <typename Op>
int64_t TrackedPeakOf(Op op) {
  op();  // warm-up: primitive caches and weight formats
  const int64_t before = MemoryTracker::current_bytes();
  MemoryTracker::ResetProbePeak();
  at::Tensor output = op();
  return MemoryTracker::probe_peak_bytes() - before;
}

TEST(MemoryAccounting, SeesOneDnnScratchpad) {
  MemoryTracker::Install();
  // A convolution runs as oneDNN primitives on every x86 CPU: reorders into a blocked layout and
  // the convolution, each with a user scratchpad; their buffers come from the c10 allocator.
  at::Tensor input = at::ones({1, 16, 64, 64}), weight = at::ones({32, 16, 3, 3});
  const int64_t conv_output = 1 * 32 * 62 * 62 * 4;
  const int64_t conv_peak = TrackedPeakOf([&] { return at::conv2d(input, weight); });
  std::printf("fp32 3x3 convolution: output %lld bytes, tracked peak %lld bytes\n",
              static_cast<long long>(conv_output), static_cast<long long>(conv_peak));
  EXPECT_GT(conv_peak, conv_output) << "oneDNN's buffers go through the c10 allocator";
  // The model's GEMMs: a CPU without native bf16 computes them in the BLAS or with a oneDNN
  // scratchpad; either way the output is seen, and any scratchpad with it.
  at::Tensor a = at::ones({512, 512}, at::kBFloat16), b = at::ones({512, 512}, at::kBFloat16);
  const int64_t gemm_output = 512 * 512 * 2;
  const int64_t gemm_peak = TrackedPeakOf([&] { return at::mm(a, b); });
  std::printf("bf16 512x512 GEMM: output %lld bytes, tracked peak %lld bytes\n",
              static_cast<long long>(gemm_output), static_cast<long long>(gemm_peak));
  EXPECT_GE(gemm_peak, gemm_output);
}

TEST(MemoryModel, PredictsTheReferencePeakOnASmallModel) {
  MemoryTracker::Install();
  for (const char* recompute :
       {kNone, "{ granularity = \"full\", method = \"uniform\", num_layers = 1 }"}) {
    Recipe recipe = ParseRecipe(RecipeText(4, recompute), "model.toml");
    Trainer trainer(recipe, recipe.arm("a"), ParallelLayout::Make(0, 1, 1, 4),
                    Communicator::Local());
    MemoryProbe probe = ProbeMemory(trainer.model(), trainer.MakeMicrobatches(1).front());
    MemoryPrediction prediction =
        PredictPeak(probe, recipe.arm("a"), recipe.model, recipe.pipeline(), 0,
                    recipe.microbatches_per_rank(), MemoryTracker::current_bytes());
    int64_t measured = 0;
    for (int64_t it = 1; it <= 2; ++it)
      measured = std::max(measured, trainer.RunIteration(it, nullptr).peak_bytes);
    const double error =
        static_cast<double>(measured - prediction.peak_bytes) / prediction.peak_bytes;
    EXPECT_LT(std::fabs(error), 0.10)
        << recompute << ": measured " << measured << ", predicted " << prediction.peak_bytes << " ("
        << prediction.peak_phase << ")";
  }
}

}  // namespace
}  // namespace bitparity

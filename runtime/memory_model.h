#ifndef BITPARITY_RUNTIME_MEMORY_MODEL_H_
#define BITPARITY_RUNTIME_MEMORY_MODEL_H_

// The activation-memory model: predicts an arm's peak CPU tensor bytes per rank from the sizes of
// the model's own tensors and the arm's schedule, with nothing fitted to the peaks it predicts.
//
// Sizes come from probes run once before training on one real microbatch (collectively, since
// MoE layers communicate; the EP ranks of a stage probe the same layers): for each kind of layer
// the rank holds, the bytes its graph keeps after its forward (A, its output included), the
// transient above that while it runs with and without grad, the transient of its backward, and
// its parameters' gradient bytes, and what its delayed weight gradients hold; the layer input (I);
// the embedding and the post-process where the rank holds them. The prediction walks the arm's
// schedule on this rank (the reference's 1F1B passes, a forward then a backward, or the overlap
// arm's CombinedStepPlan; with a pipeline over the rank's model chunks, with the activations and
// gradients received and sent between stages), adding and releasing those sizes as layers are
// built, replayed and backpropagated, and returns the static bytes plus the largest total met. For
// L layers per chunk, N passes in flight (the pipeline's warm-up depth) and segments of k layers
// this reproduces N*L*A (no recompute), N*I + L*A (chunk) and N*ceil(L/k)*I + k*A (segments) plus
// the transients those formulas leave out.

#include <cstdint>
#include <string>
#include <vector>

#include "config/recipe.h"
#include "model/gpt.h"
#include "schedule/pipeline_layout.h"
#include "trace/trace.h"

namespace bitparity {

struct LayerMemory {
  int64_t retained = 0;                   // A: bytes the layer's graph keeps after its forward
  int64_t forward_transient = 0;          // above `retained` while its forward runs with grad
  int64_t forward_transient_no_grad = 0;  // while its forward runs without grad
  int64_t backward_transient = 0;         // above the pre-backward level, gradients excluded
  int64_t grad_bytes = 0;                 // its parameters' .grad bytes
  // What the overlap arm's nodes keep of the layer beyond `retained`: each node runs its piece as
  // a graph of its own on detached inputs and holds its outputs, and an all-to-all node what it
  // received, until its backward, where one graph of the layer frees what it does not save.
  int64_t node_boundary_bytes = 0;
  // With delayed weight gradients (an overlap arm's delay_wgrad): what the weight gradients the
  // attn node and the mlp node leave pending hold from the node's backward to its wgrad (their
  // linear layers' input rows and output gradients), and the .grad bytes they then produce.
  int64_t attn_wgrad_held = 0;
  int64_t attn_wgrad_grad_bytes = 0;
  int64_t mlp_wgrad_held = 0;
  int64_t mlp_wgrad_grad_bytes = 0;
};

struct MemoryProbe {
  int64_t input_bytes = 0;  // I: one layer's input (= output) tensor
  int64_t input_width = 1;  // its last dimension (the residual stream's width)
  // The embedding's and (below) the post-process's sizes; 0 on ranks without them.
  int64_t embedding_retained = 0;
  int64_t embedding_grad_bytes = 0;
  // By the model's layer index (decoder layers, then MTP depths); layers of other pipeline ranks
  // stay zero.
  std::vector<LayerMemory> layers;
  int64_t post_retained = 0;
  int64_t post_forward_transient = 0;
  int64_t post_backward_transient = 0;
  int64_t post_grad_bytes = 0;
  int64_t reduction_transient = 0;  // the data-parallel gradient reduction's buffers
};

// The model's live bytes where one recompute segment's replay is done (the overlap arm's
// `replay_done` marker), for the recompute census: the bytes above the static ones, and what the
// segment's replayed layers hold (the activations one segment adds).
struct ReplayLevel {
  SegmentReplayPoint point;
  int64_t live_bytes = 0;
  int64_t segment_bytes = 0;
};

struct MemoryPrediction {
  int64_t static_bytes = 0;  // live at iteration start: weights, masters, main grads, Adam
  int64_t peak_bytes = 0;    // predicted peak of an iteration
  std::string peak_phase;    // where the model puts the peak
  // What the walk still held when the iteration's passes were done: 0, since every pass releases
  // what it added (tests check it).
  int64_t unreleased_bytes = 0;
  // One entry per segment replay of the iteration, in the plan's order (overlap arms only).
  std::vector<ReplayLevel> replay_levels;
};

// Measures the probe on `model` (the layers of its rank) with one microbatch; every rank of the
// EP group must call it at the same point. Leaves no gradient behind and draws no number from
// the training's random streams.
MemoryProbe ProbeMemory(GptModel& model, ChunkState microbatch);

// The peak of one iteration of `arm` on pipeline rank `pp_rank` of `pipeline` with
// `microbatches` per pipeline rank.
MemoryPrediction PredictPeak(const MemoryProbe& probe, const ArmConfig& arm,
                             const ModelConfig& model, const PipelineLayout& pipeline,
                             int64_t pp_rank, int64_t microbatches, int64_t static_bytes);

}  // namespace bitparity

#endif  // BITPARITY_RUNTIME_MEMORY_MODEL_H_

#ifndef BITPARITY_OVERLAP_IMPL_COMBINED_STEP_PLAN_H_
#define BITPARITY_OVERLAP_IMPL_COMBINED_STEP_PLAN_H_

// The schedule of one iteration of the overlap arm on one pipeline rank, as data: the ordered
// list of node operations over every (model chunk, microbatch) pair of the rank. The pairs run in
// the order of Megatron's combined 1F1B (schedule/pipeline_schedule.h with the EP overlap's extra
// warm-up forward): without a pipeline F0, (F1 | B0), ..., (F(M-1) | B(M-2)), B(M-1); with one,
// the interleaved order, where a combined step merges the forward of one (chunk, microbatch)
// with the backward of another, possibly of another chunk with another number of layers.
//
// Inside a combined step (Megatron's TransformerModelChunkSchedulePlan.run): the forward's
// pre-process, the backward's post-process, then forward layer i paired with backward layer
// Lb-1-i for i < min(Lf, Lb) in Megatron's per-layer issue order, so that each communication
// node of one microbatch is issued next to a compute node of the other:
//
//   b: [replay segment if the layer is its tail]   b: mtp_post_process backward
//   b: combine backward (comm)                     f: [capture segment if head] attn forward
//   f: dispatch forward (comm)                     b: mlp backward
//   b: dispatch backward (comm)                    f: mlp forward
//   f: combine forward (comm)                      b: attn backward
//   f: mtp_post_process forward                    b: [release segment if the layer is its head]
//
// then the backward's remaining layers alone, then the forward's remaining layers alone.
// Each all-to-all is started when issued and waited for by the first node that needs its
// result, so it runs under the compute node issued after it: combine_bwd(k) | attn_fwd(k+1),
// dispatch_fwd(k+1) | mlp_bwd(k), dispatch_bwd(k) | mlp_fwd(k+1), combine_fwd(k+1) |
// attn_bwd(k), Megatron's pairs. The one change from Megatron's CPU issue order
// (its combined 1F1B schedule) is that dispatch forward is issued before mlp backward: on a GPU the
// comm stream overlaps them whatever the issue order; on a CPU a compute node blocks while it runs.
//
// The step ends as Megatron's does: the forward's send to the next stage with the next step's
// forward receive posted right after it (post_forward), the backward's send to the previous
// stage with the next step's gradient receive (post_backward), so that the next step's bytes
// travel while this rank still works and its first consumer waits for them only if they are
// late; then the post-process forward (loss stage), the pre-process backward (first stage), the
// per-pass gradient flush and the release of the recomputed layers' no-grad activations.
//
// With delayed weight gradients ([arms.NAME] delay_wgrad, Megatron's --delay-wgrad-compute) the
// attn and mlp backward compute input gradients only, and `wgrad` operations compute the weight
// gradients where Megatron calls backward_dw: mlp wgrad right after the layer's dispatch backward
// is started (Megatron: just before it; on a CPU issuing compute blocks, so the all-to-all is
// started first and runs under the wgrad), attn wgrad at the end of the layer pair, and the
// last backward layer's attn wgrad after the step's sends.
//
// A segment replay is listed node by node: `segment replay` (restore the chunk-state snapshot),
// every node of every layer of the segment with phase `replay` (its all-to-alls exposed: each is
// waited for by the next node), then `segment replay_done`.
// Torch-free: `bitparity plan` prints it without training.

#include <cstdint>
#include <string>
#include <vector>

#include "config/recipe.h"
#include "config/recompute_plan.h"
#include "model/chunk_state_field.h"
#include "schedule/pipeline_layout.h"
#include "schedule/pipeline_schedule.h"
#include "schedule/schedule_vocabulary.h"

namespace bitparity {

struct NodeOp {
  NodeKind node = NodeKind::kAttn;
  Phase phase = Phase::kForward;
  int64_t microbatch = 0;
  int64_t chunk = 0;     // the rank's model chunk (0 .. vpp - 1)
  int64_t layer = -1;    // within the chunk: decoder layers, then MTP; -1 for chunk operations
  int64_t segment = -1;  // for segment operations
  Stream stream = Stream::kCompute;
};

// One model chunk of the rank (a pipeline stage) as the plan schedules it. Its layers are
// numbered within the chunk, decoder layers first, then MTP depths, as its recompute plan
// counts them (Megatron's TransformerBlock counts within the chunk too).
struct ChunkPlan {
  PipelineStage stage;               // which pieces of the model the chunk holds
  int64_t model_decoder_layers = 0;  // of the whole model (names of MTP layers)
  std::vector<bool> layer_is_moe;    // per layer of the chunk
  RecomputePlan recompute;           // counted within the chunk
  // Rows of the activation entering / leaving the chunk, in microbatches: 1 + the MTP depths
  // stacked under the main hidden states (an MTP stage sends both, as Megatron does).
  int64_t input_parts = 1;
  int64_t output_parts = 1;
  // Their last dimension: the residual stream's width (n x hidden under mHC) until the decoder's
  // final norm, hidden after it (PipelineLayout::ActivationWidth).
  int64_t input_width = 0;
  int64_t output_width = 0;
  // The pipeline ranks of the stages before and after it (-1: none).
  int64_t previous_rank = -1;
  int64_t next_rank = -1;

  int64_t decoder_layers() const { return stage.layers; }
  int64_t mtp_layers() const { return stage.mtp_layers; }
  int64_t layers() const { return stage.layers + stage.mtp_layers; }
  bool is_mtp(int64_t layer) const { return layer >= stage.layers; }
  bool pre_process() const { return stage.embedding; }
  bool post_process() const { return stage.loss; }
  bool receives() const { return stage.index > 0; }
  bool sends() const { return !stage.loss; }
  // The decoder's final norm, on this chunk's last decoder layer (in its combine epilogue), in
  // the post-process of a loss stage that holds no decoder layer, or (under mHC) in the first
  // MTP depth's attn of a chunk that holds no decoder layer.
  bool final_norm_in_post_process() const {
    return stage.final_norm && stage.layers == 0 && stage.mtp_layers == 0;
  }
  // Under mHC, an MTP chunk without decoder layers: its first MTP depth's attn splits the
  // received streams into the main hidden states (the final norm's) and its own input.
  bool final_norm_in_first_mtp() const {
    return stage.final_norm && stage.layers == 0 && stage.mtp_layers > 0;
  }
  // The layer's index in the whole model (decoder layers, then MTP depths after them) and its
  // name there: "3" (decoder layer 3) or "mtp0".
  int64_t ModelLayer(int64_t layer) const;
  std::string LayerName(int64_t layer) const;
};

// The model chunks of pipeline rank `pp_rank` (all of the model as one chunk without a
// pipeline), each with its recompute segments counted within it.
std::vector<ChunkPlan> BuildChunkPlans(const ModelConfig& model, const PipelineLayout& pipeline,
                                       int64_t pp_rank, const RecomputeConfig& recompute);

struct CombinedStepPlan {
  int64_t microbatches = 0;  // per pipeline rank
  int64_t pp = 1;
  int64_t vpp = 1;
  int64_t pp_rank = 0;
  bool mhc = false;                 // layers carry an mhc_post node
  bool delay_wgrad = false;         // attn and mlp leave their weight gradients to wgrad ops
  std::vector<ChunkPlan> chunks;    // the rank's model chunks, by chunk index
  std::vector<PipelineStep> steps;  // the combined steps, in order
  std::vector<NodeOp> ops;
  // How a segment replay treats an MTP layer's post-process and the chunk state: inside the
  // segment, and restored from the segment's snapshot, in every plan BuildCombinedStepPlan
  // makes. A faulty plan (overlap_impl/faulty_plans.h) turns one off to re-create a silent bug.
  bool mtp_post_process_in_segment = true;
  // Under mHC with MTP: an MTP pass parks the bridge leaf it read (ChunkState::mhc_grad_carrier)
  // and a replay of the producer takes the gradient over from it. A faulty plan takes it from
  // ChunkState::mhc_multistream instead, which the last MTP post-process cleared.
  bool mhc_bridge_parks_gradient = true;
  // Per chunk-state field (model/chunk_state_field.h): restored by a replay.
  ChunkStateFieldFlags replay_restores = {true, true, true, true, true};

  const ChunkPlan& chunk(int64_t index) const { return chunks[static_cast<size_t>(index)]; }
  // Whether the rank is one of several pipeline ranks (its plan holds transfers).
  bool pipelined() const { return pp > 1; }
};

// The plan of pipeline rank `pp_rank` over the stages of `pipeline` (each chunk's recompute
// segments counted within the chunk).
CombinedStepPlan BuildCombinedStepPlan(const ModelConfig& model, const PipelineLayout& pipeline,
                                       int64_t pp_rank, int64_t microbatches,
                                       const RecomputeConfig& recompute, bool delay_wgrad = false);
// The plan without a pipeline: the whole model is one chunk.
CombinedStepPlan BuildCombinedStepPlan(const ModelConfig& model, int64_t microbatches,
                                       const RecomputeConfig& recompute, bool delay_wgrad = false);

// The plan `arm` runs on pipeline rank `pp_rank`, with the arm's recompute and delayed weight
// gradients: the one way the engine, the memory model and `bitparity plan` build it. A pipeline
// without stages (a model built without a layout): the whole model as one chunk.
CombinedStepPlan PlanForArm(const ModelConfig& model, const PipelineLayout& pipeline,
                            int64_t pp_rank, int64_t microbatches, const ArmConfig& arm);

// A table with one line per operation, preceded by the segments.
std::string FormatPlan(const CombinedStepPlan& plan);
// The same as a JSON document.
std::string PlanToJson(const CombinedStepPlan& plan);

}  // namespace bitparity

#endif  // BITPARITY_OVERLAP_IMPL_COMBINED_STEP_PLAN_H_

#ifndef BITPARITY_OVERLAP_IMPL_COMBINED_STEP_PLAN_H_
#define BITPARITY_OVERLAP_IMPL_COMBINED_STEP_PLAN_H_

// The schedule of one iteration of the overlap arm, as data: the ordered list of node
// operations over every microbatch. Microbatches run F0, (F1 | B0), ..., (F(M-1) | B(M-2)),
// B(M-1); inside a combined step the post-process backward comes first, then forward layer i
// is paired with backward layer L-1-i in Megatron's per-layer issue order, so that each
// communication node of one microbatch is issued next to a compute node of the other:
//
//   b: [replay segment if the layer is its tail]   b: mtp_post_process backward
//   b: combine backward (comm)                     f: [capture segment if head] attn forward
//   f: dispatch forward (comm)                     b: mlp backward
//   b: dispatch backward (comm)                    f: mlp forward
//   f: combine forward (comm)                      b: attn backward
//   f: mtp_post_process forward                    b: [release segment if the layer is its head]
//
// Each all-to-all is started when issued and waited for by the first node that needs its
// result, so it runs under the compute node issued after it: combine_bwd(k) | attn_fwd(k+1),
// dispatch_fwd(k+1) | mlp_bwd(k), dispatch_bwd(k) | mlp_fwd(k+1), combine_fwd(k+1) |
// attn_bwd(k), Megatron's pairs. The one change from Megatron's CPU issue order (research
// §1.4) is that dispatch forward is issued before mlp backward: on a GPU the comm stream
// overlaps them whatever the issue order; on a CPU a compute node blocks while it runs.
//
// then the post-process forward, the pre-process backward and the per-microbatch gradient
// flush. A segment replay is listed node by node: `segment replay` (restore the chunk-state
// snapshot and the RNG state), every node of every layer of the segment with phase `replay`
// (its all-to-alls exposed: each is waited for by the next node), then `segment replay_done`.
// Torch-free: `bitparity plan` prints it without training.

#include <cstdint>
#include <string>
#include <vector>

#include "core/recipe.h"
#include "core/recompute_plan.h"

namespace bitparity {

enum class NodeKind {
  kPreProcess,
  kAttn,
  kDispatch,
  kMlp,
  kCombine,
  kCombineEpilogue,  // the combine's compute: wait for its all-to-all, unpermute, residual
  kMtpPostProcess,
  kPostProcess,
  kSegment,  // a recompute segment: capture, replay, release
  kChunk,    // a microbatch as a whole: gradient flush, release of recomputed activations
};

enum class Phase {
  kForward,
  kBackward,
  kCapture,             // segment: keep the head's input, a chunk-state snapshot, the RNG state
  kReplay,              // segment: restore its snapshot and RNG; a node: run its forward again
  kReplayDone,          // segment: the replay ran; the ambient RNG state comes back
  kRelease,             // segment: drop what Capture kept
  kFlushGrads,          // chunk: add the microbatch's .grad into the fp32 main grads
  kReleaseActivations,  // chunk: drop what the no-grad forward of recomputed layers held
};

enum class Stream { kCompute, kComm, kNone };

const char* ToString(NodeKind kind);
const char* ToString(Phase phase);
const char* ToString(Stream stream);

struct NodeOp {
  NodeKind node = NodeKind::kAttn;
  Phase phase = Phase::kForward;
  int64_t microbatch = 0;
  int64_t layer = -1;    // -1 for chunk-level operations
  int64_t segment = -1;  // for segment operations
  Stream stream = Stream::kCompute;
};

struct CombinedStepPlan {
  int64_t decoder_layers = 0;
  int64_t mtp_layers = 0;
  int64_t microbatches = 0;
  std::vector<bool> layer_is_moe;  // per layer, decoder then MTP
  RecomputePlan recompute;
  std::vector<NodeOp> ops;
  // How a segment replay treats an MTP layer's post-process and the chunk state: inside the
  // segment, and restored from the segment's snapshot, in every plan BuildCombinedStepPlan
  // makes. A faulty plan (overlap_impl/faulty_plans.h) turns one off to re-create a silent bug.
  bool mtp_post_process_in_segment = true;
  bool replay_restores_chunk_state = true;

  int64_t layers() const { return decoder_layers + mtp_layers; }
  bool is_mtp(int64_t layer) const { return layer >= decoder_layers; }
};

CombinedStepPlan BuildCombinedStepPlan(const ModelConfig& model, int64_t microbatches,
                                       const RecomputeConfig& recompute);

// A table with one line per operation, preceded by the segments.
std::string FormatPlan(const CombinedStepPlan& plan);
// The same as a JSON document.
std::string PlanToJson(const CombinedStepPlan& plan);

}  // namespace bitparity

#endif  // BITPARITY_OVERLAP_IMPL_COMBINED_STEP_PLAN_H_

#ifndef BITPARITY_OVERLAP_IMPL_CHUNK_SCHEDULE_H_
#define BITPARITY_OVERLAP_IMPL_CHUNK_SCHEDULE_H_

// The per-(model chunk, microbatch) side of the overlap arm (Megatron's
// TransformerModelChunkSchedulePlan): a ChunkSchedule owns one microbatch's chunk state for one
// model chunk, its pre- and post-process nodes (on the first and the loss stage), its pipeline
// transfers (on the others), one LayerSchedule per decoder and MTP layer of the chunk (attn,
// moe_dispatch, mlp, moe_combine and mtp_post_process nodes plus the layer state they share)
// and its RecomputeSegments. The combined-step runner calls these operations in the order of the
// CombinedStepPlan.

#include <ATen/ATen.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "model/gpt.h"
#include "overlap_impl/combined_step_plan.h"
#include "overlap_impl/schedule_node.h"
#include "overlap_impl/stale_routing_fault.h"

namespace bitparity {

// One all-to-all or compute interval of the iteration, for the overlap timeline.
struct TimelineEvent {
  NodeKind node = NodeKind::kAttn;
  Phase phase = Phase::kForward;
  int64_t microbatch = 0;
  int64_t chunk = 0;   // the rank's model chunk the pass belongs to
  int64_t layer = -1;  // within the chunk; -1 for a pipeline transfer
  bool comm = false;
  int64_t begin_ns = 0;       // compute: start; comm: when the transfer was started
  int64_t end_ns = 0;         // compute: end; comm: when its result had been waited for
  int64_t completed_ns = 0;   // all-to-all: when the collective library finished it
  int64_t wait_begin_ns = 0;  // comm: when the schedule started to wait for it
};

class ChunkSchedule;

// What every chunk schedule of an engine shares.
struct OverlapContext {
  GptModel* model = nullptr;
  const CombinedStepPlan* plan = nullptr;
  Communicator* pipeline = nullptr;                // the pipeline group, when pp > 1
  std::vector<PendingTransfer>* sends = nullptr;   // started sends, the engine's to wait for
  std::vector<TimelineEvent>* timeline = nullptr;  // optional
  StaleRoutingFault* stale_routing = nullptr;      // only under that injected bug
};

class LayerSchedule {
 public:
  // `layer` is numbered within the chunk (decoder layers, then MTP depths).
  LayerSchedule(OverlapContext* context, ChunkSchedule* chunk, int64_t layer);

  // Runs one operation of the plan on this layer (op.layer == index()): a forward, a replay
  // (the forward again, with grad) or a backward of one of its nodes. `grad` is the gradient the
  // microbatch's previous backward operation handed on; returns the one this operation hands on:
  // the layer input's gradient after attn backward, the gradient of the combine's output after
  // mtp_post_process backward, none after moe_combine backward (the gradient travels inside the
  // layer from there), and `grad` itself after a forward.
  at::Tensor Run(const NodeOp& op, at::Tensor grad);

  // The layer's output (after mtp_post_process for MTP layers), once the plan's
  // moe_combine_epilogue has run. A recomputed layer releases its nodes as soon as its forward is
  // done and keeps only this tensor until the chunk step ends.
  const at::Tensor& Output();

  // Recomputed layers run their initial forward without building graphs.
  void SetForwardNoGrad(bool no_grad);
  // A faulty plan's keep_graphs operation: the compute nodes' next backward keeps
  // its graph until DropKeptGraphs.
  void KeepGraphsAfterBackward();
  void DropKeptGraphs();
  void set_segment_tail(bool tail) { segment_tail_ = tail; }
  void Release();
  // Releases the nodes that ran without a graph (they are replayed); called when the layer's
  // forward is done.
  void ReleaseRecomputed();
  // After the chunk step: drops the kept output of a recomputed layer.
  void ReleaseOutput() {
    if (attn_.forward_no_grad()) output_ = at::Tensor();
  }
  bool holds_tensors() const;
  // Weight gradients left by a backward and not computed yet (delay_wgrad).
  bool has_pending_wgrads() const { return !attn_wgrads_.empty() || !mlp_wgrads_.empty(); }
  int64_t index() const { return layer_; }

 private:
  // The node operations Run dispatches to; `phase` is kForward or kReplay for forwards.
  void AttnForward(const at::Tensor& input, Phase phase);
  void DispatchForward();
  void MlpForward(Phase phase);
  void CombineForward();
  // moe_combine_epilogue: waits for the combine's all-to-all and runs its epilogue (unpermute,
  // residual, final norm).
  void FinishCombine(Phase phase);
  // mhc_post (under mHC): the streams' update with the MLP output, on the last decoder layer also
  // the contraction, the final norm and the bridge to MTP.
  void MhcPostForward(Phase phase);
  at::Tensor MhcPostBackward(const at::Tensor& grad);  // the gradient of the MLP output
  // The layer's output is `out` (made without a graph when `no_grad`): kept for its consumer,
  // made grad-requiring at a segment's tail, and a no-grad layer's nodes released.
  void FinishLayer(const at::Tensor& out, bool no_grad);
  // On the last decoder layer under mHC with MTP: `leaf` is the bridge the MTP depth reads; a
  // gradient parked by an MTP pass moves onto it.
  void InstallBridge(const at::Tensor& leaf);
  void MtpPostProcessForward(Phase phase);
  at::Tensor MtpPostProcessBackward(const at::Tensor& grad);
  void CombineBackward(const at::Tensor& grad);
  void MlpBackward();
  void DispatchBackward();
  at::Tensor AttnBackward();  // the gradient of the layer's input
  // A wgrad operation: the weight gradients `node`'s backward left in `wgrads`.
  void RunWgrads(ops::DelayedWgrads& wgrads, NodeKind node);

  const std::vector<int64_t>& SendSplits() const;
  const std::vector<int64_t>& RecvSplits() const;
  // Timeline events (when the engine records a timeline).
  void Record(NodeKind node, Phase phase, int64_t begin_ns);
  // Node probes (core/node_probes.h): `tensors` as the outputs (forward, replay) or the input
  // gradients (backward) of this layer's `node`.
  void Probe(NodeKind node, Phase phase, const std::vector<at::Tensor>& tensors);
  void RecordComm(const AllToAllNode& node, Phase phase);
  // A faulty plan's wait operation: waits for the all-to-all `node` (moe_dispatch or
  // moe_combine) just started.
  void Wait(NodeKind node);
  // The all-to-all's result (forward) or returned gradients (backward), waited for here; the
  // wait is a timeline event when it was still in flight.
  std::vector<at::Tensor> Received(AllToAllNode& node, Phase phase);
  std::vector<at::Tensor> ReturnedGrads(AllToAllNode& node);

  OverlapContext* context_;
  ChunkSchedule* chunk_;
  int64_t layer_;
  bool moe_;
  bool mtp_;
  bool last_decoder_;
  bool last_mtp_;
  bool segment_tail_ = false;
  const LayerWeights* weights_;
  const MtpWeights* mtp_weights_;

  // Under delay_wgrad: the weight gradients attn and mlp backward left, run by the plan's wgrad
  // operations. They outlive the nodes' release (attn backward releases the layer).
  ops::DelayedWgrads attn_wgrads_;
  ops::DelayedWgrads mlp_wgrads_;
  ComputeNode attn_{NodeKind::kAttn};
  AllToAllNode dispatch_;                     // null in a dense layer
  Phase dispatch_started_ = Phase::kForward;  // the direction of its last start
  ComputeNode mlp_{NodeKind::kMlp};
  AllToAllNode combine_comm_;  // null in a dense layer
  Phase combine_started_ = Phase::kForward;
  ComputeNode combine_{NodeKind::kCombine};
  ComputeNode mhc_post_{NodeKind::kMhcPost};  // used under mHC only
  ComputeNode mtp_post_{NodeKind::kMtpPostProcess};

  // Layer state shared by this layer's nodes for this microbatch only.
  std::shared_ptr<const RoutingPlan> routing_;
  at::Tensor residual_;  // the attention residual, detached by attn, consumed by combine
  MhcMapping mlp_mhc_;   // under mHC: the MLP sublayer's mapping, detached by attn
  bool combine_pending_ = false;
  bool mhc_post_pending_ = false;
  std::vector<at::Tensor> mlp_input_grads_;
  at::Tensor output_;
};

// A group of consecutive layers whose activations are rebuilt right before their backward.
class RecomputeSegment {
 public:
  explicit RecomputeSegment(const LayerSegment& spec) : spec_(spec) {}

  // Runs one segment operation of the plan: capture, replay (its start), replay done, release.
  void Run(const NodeOp& op, ChunkSchedule* chunk);

  // Before the head layer's forward: keep its input and the chunk state (every mutable field of
  // model/chunk_state_field.h; no RNG state: dropout masks are keyed by their site,
  // ops::Dropout, and nothing else draws at random).
  void Capture(const at::Tensor& input, const ChunkState& state);
  // Before the tail layer's backward: restore the snapshot's fields and turn grad back on for
  // the segment's layers; the plan's replay operations then run every node's forward again from
  // input(). `restores` is the plan's, every field but in a faulty plan.
  void BeginReplay(ChunkSchedule* chunk, const ChunkStateFieldFlags& restores);
  const at::Tensor& input() const { return input_; }
  // After the head layer's backward.
  void Release();

  bool holds_input() const { return input_.defined(); }
  const LayerSegment& spec() const { return spec_; }

 private:
  LayerSegment spec_;
  at::Tensor input_;
  ChunkState snapshot_;
};

class ChunkSchedule {
 public:
  // One pass of chunk `plan` over `state`, a copy of the microbatch's (the chunk's MTP layers
  // roll its ids). Loss values go to `losses`, which every chunk of the microbatch shares.
  ChunkSchedule(OverlapContext* context, const ChunkPlan* plan, ChunkState state,
                MicrobatchLosses* losses);

  // Runs one operation of the plan on this (chunk, microbatch): its pre- or post-process, a
  // pipeline transfer, a chunk-level operation, a segment's, or one of a layer's
  // (LayerSchedule::Run). `grad` is the gradient the pass's previous backward operation handed on;
  // returns the one this operation hands on (post_process backward or the received gradient
  // starts it, pre_process backward or the send to the previous stage ends it).
  at::Tensor Run(const NodeOp& op, at::Tensor grad);

  // The input of `layer` for `op`: the chunk's input, the previous layer's output, or for the
  // replay of a segment's first layer the segment's kept input.
  at::Tensor LayerInput(int64_t layer, const NodeOp& op);
  // What enters the chunk: the embedding (first stage) or the previous stage's activation,
  // waited for here the first time it is needed.
  at::Tensor ChunkInput();
  // What leaves it: the last layer's output, or its input when it holds no layer.
  at::Tensor ChunkOutput();

  LayerSchedule& layer(int64_t index) { return *layers_[index]; }
  RecomputeSegment& segment(int64_t index) { return segments_[index]; }
  size_t segment_count() const { return segments_.size(); }
  size_t layer_count() const { return layers_.size(); }
  bool holds_tensors() const;  // anything but the kept segment inputs

  OverlapContext* context() { return context_; }
  const ChunkPlan& plan() const { return *plan_; }
  ChunkState& state() { return state_; }
  MicrobatchLosses& losses() { return *losses_; }

 private:
  // The pipeline transfers: receives are posted early (kP2pRecv) and waited for by their first
  // consumer; sends are handed to the engine, which waits for them.
  void PostReceive(Phase phase);
  void Send(Phase phase, const at::Tensor& grad);
  at::Tensor WaitReceived(PendingTransfer* transfer, Phase phase);
  // The pipeline rank of the previous or the next stage (logic_error when there is none).
  int64_t PeerRank(bool previous) const;
  void RecordTransfer(NodeKind node, Phase phase, int64_t begin_ns, int64_t wait_begin_ns);

  void PreProcessForward();
  void PostProcessForward();
  at::Tensor PostProcessBackward();  // the gradient of the last layer's output
  void PreProcessBackward(const at::Tensor& grad);
  // After the chunk step of the forward: recomputed layers keep nothing.
  void ReleaseRecomputedActivations();

  OverlapContext* context_;
  const ChunkPlan* plan_;
  ChunkState state_;
  MicrobatchLosses* losses_;
  PendingTransfer activation_receive_;  // posted, not yet waited for
  PendingTransfer gradient_receive_;
  int64_t activation_posted_ns_ = 0;
  int64_t gradient_posted_ns_ = 0;
  // The received activation as a grad-requiring leaf, until the forward has handed it on (the
  // first layer's nodes or the segment capture keep it from there).
  at::Tensor received_activation_;
  ComputeNode pre_process_{NodeKind::kPreProcess};
  ComputeNode post_process_{NodeKind::kPostProcess};
  std::vector<std::unique_ptr<LayerSchedule>> layers_;
  std::vector<RecomputeSegment> segments_;
};

}  // namespace bitparity

#endif  // BITPARITY_OVERLAP_IMPL_CHUNK_SCHEDULE_H_

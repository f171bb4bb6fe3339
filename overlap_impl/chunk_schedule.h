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
#include <memory>
#include <vector>

#include "overlap_impl/layer_schedule.h"
#include "overlap_impl/recompute_segment.h"

namespace bitparity {

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
  at::Tensor WaitReceived(PendingPipelineReceive* transfer, Phase phase);
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
  PendingPipelineReceive activation_receive_;  // posted, not yet waited for
  PendingPipelineReceive gradient_receive_;
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

// An event of the pass `chunk` runs: its node, phase, microbatch, chunk and layer (-1: the
// chunk's own).
TimelineEvent PassEvent(ChunkSchedule& chunk, NodeKind node, Phase phase, int64_t layer, bool comm);

}  // namespace bitparity

#endif  // BITPARITY_OVERLAP_IMPL_CHUNK_SCHEDULE_H_

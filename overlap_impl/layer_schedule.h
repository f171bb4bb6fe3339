#ifndef BITPARITY_OVERLAP_IMPL_LAYER_SCHEDULE_H_
#define BITPARITY_OVERLAP_IMPL_LAYER_SCHEDULE_H_

// One layer of one (model chunk, microbatch) pass of the overlap arm (Megatron's
// TransformerLayerSchedulePlan): the attn, moe_dispatch, mlp, moe_combine, mhc_post and
// mtp_post_process nodes of a decoder or MTP layer and the layer state they share for that
// microbatch; the runner calls its operations in the order of the CombinedStepPlan. Also what
// every chunk schedule of an engine shares (OverlapContext) and the timeline they write.

#include <ATen/ATen.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "comm/pipeline_channel.h"
#include "model/gpt.h"
#include "overlap_impl/combined_step_plan.h"
#include "overlap_impl/routing_source.h"
#include "overlap_impl/schedule_node.h"

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
  PipelineChannel* pipeline = nullptr;             // the pipeline transfers, when pp > 1
  std::vector<PendingTransfer>* sends = nullptr;   // started sends, the engine's to wait for
  std::vector<TimelineEvent>* timeline = nullptr;  // optional
  RoutingSource* routing = nullptr;                // CarriedRouting, or the stale-routing fault
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
  // Drops what the layer's nodes hold from its attn node to its mhc_post node, and the routing
  // and residual state between them (not the MTP post-process, the kept input gradients or the
  // output).
  void ReleaseLayerState();
  // The node operations Run dispatches to; `phase` is kForward or kReplay for forwards.
  void AttnForward(const at::Tensor& input, Phase phase);
  void DispatchForward();
  void MlpForward(Phase phase);
  void CombineForward();
  // moe_combine_epilogue: waits for the combine's all-to-all and runs its epilogue (unpermute,
  // residual, final norm).
  void FinishCombine(Phase phase);
  // mhc_post (under mHC): the streams' update with the MLP output, on the last decoder layer also
  // the streams' mean, the final norm and the bridge to MTP.
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
  // Node probes (trace/node_probes.h): `tensors` as the outputs (forward, replay) or the input
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

}  // namespace bitparity

#endif  // BITPARITY_OVERLAP_IMPL_LAYER_SCHEDULE_H_

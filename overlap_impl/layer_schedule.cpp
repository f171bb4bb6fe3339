#include "overlap_impl/layer_schedule.h"

#include <torch/torch.h>

#include <optional>
#include <stdexcept>
#include <string>
#include <utility>

#include "core/clock.h"
#include "core/errors.h"
#include "numerics/flop_count.h"
#include "overlap_impl/chunk_schedule.h"
#include "trace/node_probes.h"

namespace bitparity {

namespace {

// A dense layer runs the same operations as an MoE layer; its all-to-alls are null nodes.
AllToAllNode::Kind AllToAllKind(const ChunkPlan& chunk, int64_t layer) {
  return chunk.layer_is_moe[static_cast<size_t>(layer)] ? AllToAllNode::Kind::kAllToAll
                                                        : AllToAllNode::Kind::kNull;
}

}  // namespace

LayerSchedule::LayerSchedule(OverlapContext* context, ChunkSchedule* chunk, int64_t layer)
    : context_(context),
      chunk_(chunk),
      layer_(layer),
      dispatch_(NodeKind::kDispatch, AllToAllKind(chunk->plan(), layer)),
      combine_comm_(NodeKind::kCombine, AllToAllKind(chunk->plan(), layer)) {
  const ChunkPlan& plan = chunk->plan();
  const GptWeights& w = context->model->weights();
  moe_ = plan.layer_is_moe[static_cast<size_t>(layer)];
  mtp_ = plan.is_mtp(layer);
  last_decoder_ = layer == plan.decoder_layers() - 1 && plan.stage.final_norm;
  last_mtp_ = layer == plan.layers() - 1 && mtp_;
  mtp_weights_ =
      mtp_ ? &w.mtp[static_cast<size_t>(plan.stage.first_mtp + layer - plan.decoder_layers())]
           : nullptr;
  weights_ =
      mtp_ ? &mtp_weights_->layer : &w.layers[static_cast<size_t>(plan.stage.first_layer + layer)];
  if (context->plan->delay_wgrad) {
    attn_.set_wgrad_sink(&attn_wgrads_);
    mlp_.set_wgrad_sink(&mlp_wgrads_);
  }
}

at::Tensor LayerSchedule::Run(const NodeOp& op, at::Tensor grad) {
  const bool backward = op.phase == Phase::kBackward;
  if (op.phase == Phase::kWait && IsAllToAll(op.node)) {  // a faulty plan's
    Wait(op.node);
    return grad;
  }
  if (op.phase == Phase::kWgrad && op.node == NodeKind::kAttn) {
    RunWgrads(attn_wgrads_, NodeKind::kAttn);
    return grad;
  }
  if (op.phase == Phase::kWgrad && op.node == NodeKind::kMlp) {
    RunWgrads(mlp_wgrads_, NodeKind::kMlp);
    return grad;
  }
  switch (op.node) {
    case NodeKind::kAttn:
      if (backward) return AttnBackward();
      AttnForward(chunk_->LayerInput(layer_, op), op.phase);
      return grad;
    case NodeKind::kDispatch:
      if (backward) {
        DispatchBackward();
      } else {
        DispatchForward();
      }
      return grad;
    case NodeKind::kMlp:
      if (backward) {
        MlpBackward();
      } else {
        MlpForward(op.phase);
      }
      return grad;
    case NodeKind::kCombine:
      if (backward) {
        CombineBackward(grad);
        return at::Tensor();  // the gradient travels on inside the layer, to attn backward
      }
      CombineForward();
      return grad;
    case NodeKind::kCombineEpilogue:
      FinishCombine(op.phase);
      return grad;
    case NodeKind::kMhcPost:
      if (backward) return MhcPostBackward(grad);
      MhcPostForward(op.phase);
      return grad;
    case NodeKind::kMtpPostProcess:
      if (backward) return MtpPostProcessBackward(grad);
      MtpPostProcessForward(op.phase);
      return grad;
    case NodeKind::kPreProcess:  // operations of the chunk, not of a layer
    case NodeKind::kPostProcess:
    case NodeKind::kP2pRecv:
    case NodeKind::kP2pSend:
    case NodeKind::kSegment:
    case NodeKind::kChunk:
      break;
  }
  throw std::logic_error(std::string("overlap plan: layer ") + chunk_->plan().LayerName(layer_) +
                         " (chunk " + std::to_string(op.chunk) + ", microbatch " +
                         std::to_string(op.microbatch) + ") has no operation " + ToString(op.node) +
                         "/" + ToString(op.phase));
}

void LayerSchedule::Probe(NodeKind node, Phase phase, const std::vector<at::Tensor>& tensors) {
  if (!NodeProbes::enabled()) return;
  const ChunkPlan& plan = chunk_->plan();
  ProbeSite site;
  site.microbatch = chunk_->state().microbatch;
  site.chunk = plan.stage.chunk;
  site.layer = ProbeLayerName(plan.ModelLayer(layer_), plan.model_decoder_layers);
  site.node = node;
  site.phase = phase;
  NodeProbes::Record(site, tensors);
}

void LayerSchedule::Record(NodeKind node, Phase phase, int64_t begin_ns) {
  if (!context_->timeline) return;
  TimelineEvent e = PassEvent(*chunk_, node, phase, layer_, /*comm=*/false);
  e.begin_ns = begin_ns;
  e.end_ns = SteadyNanoseconds();
  context_->timeline->push_back(e);
}

std::vector<at::Tensor> LayerSchedule::Received(AllToAllNode& node, Phase phase) {
  const bool waits = node.pending();
  std::vector<at::Tensor> received = node.FinishForward();
  if (waits) RecordComm(node, phase);
  return received;
}

std::vector<at::Tensor> LayerSchedule::ReturnedGrads(AllToAllNode& node) {
  const bool waits = node.pending();
  std::vector<at::Tensor> grads = node.FinishBackward();
  if (waits) RecordComm(node, Phase::kBackward);
  return grads;
}

void LayerSchedule::Wait(NodeKind node) {
  AllToAllNode& comm = node == NodeKind::kDispatch ? dispatch_ : combine_comm_;
  if (!comm.pending()) return;  // a dense layer's null node moves nothing
  comm.CompleteNow();
  RecordComm(comm, node == NodeKind::kDispatch ? dispatch_started_ : combine_started_);
}

void LayerSchedule::RecordComm(const AllToAllNode& node, Phase phase) {
  if (!context_->timeline) return;
  const AllToAllNode::Timing& t = node.last_timing();
  TimelineEvent e = PassEvent(*chunk_, node.node(), phase, layer_, /*comm=*/true);
  e.begin_ns = t.started_ns;
  e.end_ns = t.wait_end_ns;
  e.completed_ns = t.completed_ns;
  e.wait_begin_ns = t.wait_begin_ns;
  context_->timeline->push_back(e);
}

void LayerSchedule::SetForwardNoGrad(bool no_grad) {
  attn_.set_forward_no_grad(no_grad);
  mlp_.set_forward_no_grad(no_grad);
  combine_.set_forward_no_grad(no_grad);
  mhc_post_.set_forward_no_grad(no_grad);
  mtp_post_.set_forward_no_grad(no_grad && context_->plan->mtp_post_process_in_segment);
}

void LayerSchedule::KeepGraphsAfterBackward() {
  for (ComputeNode* node : {&attn_, &mlp_, &combine_, &mhc_post_, &mtp_post_}) {
    node->KeepGraphAfterBackward();
  }
}

void LayerSchedule::DropKeptGraphs() {
  for (ComputeNode* node : {&attn_, &mlp_, &combine_, &mhc_post_, &mtp_post_}) {
    node->DropKeptGraph();
  }
}

const std::vector<int64_t>& LayerSchedule::SendSplits() const {
  static const std::vector<int64_t> kNone;
  return routing_ ? routing_->send_splits : kNone;  // a dense layer's null nodes need none
}
const std::vector<int64_t>& LayerSchedule::RecvSplits() const {
  static const std::vector<int64_t> kNone;
  return routing_ ? routing_->recv_splits : kNone;
}

void LayerSchedule::AttnForward(const at::Tensor& input, Phase phase) {
  const int64_t begin = SteadyNanoseconds();
  GptModel* model = context_->model;
  ChunkState& state = chunk_->state();
  MicrobatchLosses* losses = &chunk_->losses();
  const bool first_mtp = mtp_ && layer_ == chunk_->plan().decoder_layers();
  const bool mhc = context_->plan->mhc;
  // Under mHC on a chunk without decoder layers the streams arrive as the chunk's input, and
  // this node splits them itself: no bridge.
  const bool splits_streams = first_mtp && chunk_->plan().final_norm_in_first_mtp();
  const bool bridge = mtp_ && mhc && !splits_streams;
  if (bridge && !attn_.forward_no_grad()) {
    // The bridge: the streams the producer detached. A pass with grad parks the leaf it reads,
    // so that the gradient its backward leaves there survives a replay of the producer (which
    // installs a new leaf) and the last MTP post-process (which clears the field).
    if (!state.mhc_multistream.defined()) {
      throw std::logic_error("overlap plan: MTP layer " + chunk_->plan().LayerName(layer_) +
                             " (microbatch " + std::to_string(state.microbatch) +
                             ") runs without the decoder's mHC streams in its chunk state");
    }
    if (!state.mhc_multistream.requires_grad()) state.mhc_multistream.requires_grad_(true);
    state.mhc_grad_carrier = state.mhc_multistream;
  }
  attn_.Forward({input}, [&](ComputeNode& node, const std::vector<at::Tensor>& in) {
    at::Tensor x = in[0];
    if (mtp_) {
      // The MTP depth's prologue joins attn; its input (the decoder output) also feeds the
      // main loss, through mtp_hidden_states and mtp_post_process's concatenation. Under mHC the
      // depth reads the decoder's streams from the bridge instead.
      at::Tensor mtp_input = bridge ? state.mhc_multistream : in[0];
      if (splits_streams) {
        const DecoderOutput decoder = model->SplitDecoderOutput(in[0]);
        state.mtp_hidden_states = {decoder.main};
        mtp_input = decoder.mtp_input;
      } else if (first_mtp) {
        state.mtp_hidden_states = {in[0]};
      }
      at::Tensor embedding = model->MtpEmbedding(&state);
      x = model->MtpPrologue(*mtp_weights_, embedding, mtp_input);
    }
    LayerAttentionOutput out = model->LayerAttention(*weights_, x, state, losses);
    residual_ = node.DetachSide(out.residual);
    if (mhc) {
      mlp_mhc_.res = node.DetachSide(out.mlp_mhc.res);
      mlp_mhc_.post = node.DetachSide(out.mlp_mhc.post);
    }
    if (!moe_) return std::vector<at::Tensor>{out.mlp_input};
    routing_ = out.plan;
    context_->routing->Built(weights_->index, out.plan);
    return out.payload.ToList();
  });
  Record(NodeKind::kAttn, phase, begin);
  Probe(NodeKind::kAttn, phase, attn_.outputs());
}

void LayerSchedule::DispatchForward() {
  // attn's outputs: the dispatch payload's list (a dense layer: the MLP input alone); what carries
  // gradients travels with them, the routing mask without.
  const std::vector<at::Tensor>& out = attn_.outputs();
  const size_t carried = std::min(out.size(), DispatchPayload::kWithGradient);
  dispatch_.StartForward(
      &context_->model->comm(), std::vector<at::Tensor>(out.begin(), out.begin() + carried),
      std::vector<at::Tensor>(out.begin() + carried, out.end()), SendSplits(), RecvSplits());
  dispatch_started_ = Phase::kForward;
}

void LayerSchedule::MlpForward(Phase phase) {
  GptModel* model = context_->model;
  std::vector<at::Tensor> received = Received(dispatch_, phase);
  const int64_t begin = SteadyNanoseconds();
  if (moe_) {
    const DispatchPayload arrived = DispatchPayload::FromList(received);
    mlp_.Forward(
        {arrived.tokens, arrived.probs}, [&](ComputeNode&, const std::vector<at::Tensor>& in) {
          const DispatchPayload payload{in[0], in[1], arrived.route_mask};
          return std::vector<at::Tensor>{model->LayerExperts(*weights_, payload, *routing_)};
        });
  } else {
    mlp_.Forward({received[0]}, [&](ComputeNode&, const std::vector<at::Tensor>& in) {
      return std::vector<at::Tensor>{model->LayerDenseMlp(*weights_, in[0])};
    });
  }
  Record(NodeKind::kMlp, phase, begin);
  Probe(NodeKind::kMlp, phase, mlp_.outputs());
}

void LayerSchedule::CombineForward() {
  combine_comm_.StartForward(&context_->model->comm(), {mlp_.outputs()[0]}, {}, RecvSplits(),
                             SendSplits());
  combine_started_ = Phase::kForward;
  combine_pending_ = true;
}

void LayerSchedule::FinishCombine(Phase phase) {
  if (!combine_pending_) return;
  combine_pending_ = false;
  at::Tensor rows = Received(combine_comm_, phase)[0];
  const int64_t begin = SteadyNanoseconds();
  GptModel* model = context_->model;
  const ChunkState& state = chunk_->state();
  if (context_->plan->mhc) {
    // The unpermute and the dropout; the streams' update is mhc_post's.
    combine_.Forward({rows}, [&](ComputeNode&, const std::vector<at::Tensor>& in) {
      return std::vector<at::Tensor>{
          model->LayerMlpOutput(*weights_, in[0], routing_.get(), state)};
    });
    Record(NodeKind::kCombine, phase, begin);
    Probe(NodeKind::kCombine, phase, combine_.outputs());
    mhc_post_pending_ = true;
    return;
  }
  combine_.Forward({rows}, [&](ComputeNode&, const std::vector<at::Tensor>& in) {
    at::Tensor out =
        context_->routing->Combine(*model, *weights_, in[0], residual_, routing_.get(), state);
    if (last_decoder_) out = model->FinalNorm(out);
    return std::vector<at::Tensor>{out};
  });
  Record(NodeKind::kCombine, phase, begin);
  Probe(NodeKind::kCombine, phase, combine_.outputs());
  FinishLayer(combine_.outputs()[0], combine_.forward_no_grad());
}

void LayerSchedule::FinishLayer(const at::Tensor& out, bool no_grad) {
  // The tail of a recompute segment hands a grad-requiring tensor to its consumer, so that the
  // consumer's backward returns the gradient the replayed segment starts from.
  output_ = out;
  const bool layer_ends_segment = !mtp_ || !context_->plan->mtp_post_process_in_segment;
  if (segment_tail_ && layer_ends_segment && no_grad) output_.requires_grad_(true);
  if (!mtp_) ReleaseRecomputed();  // a no-grad layer's nodes are of no further use
}

void LayerSchedule::MhcPostForward(Phase phase) {
  if (!mhc_post_pending_) {
    throw std::logic_error("overlap plan: mhc_post of layer " + chunk_->plan().LayerName(layer_) +
                           " (microbatch " + std::to_string(chunk_->state().microbatch) +
                           ") before its combine epilogue");
  }
  mhc_post_pending_ = false;
  const int64_t begin = SteadyNanoseconds();
  GptModel* model = context_->model;
  const bool bridge = last_decoder_ && model->config().mtp_layers > 0;
  mhc_post_.Forward({combine_.outputs()[0]},
                    [&](ComputeNode& node, const std::vector<at::Tensor>& in) {
                      at::Tensor out = model->LayerResidual(residual_, in[0], &mlp_mhc_);
                      if (!last_decoder_) return std::vector<at::Tensor>{out};
                      const DecoderOutput decoder = model->SplitDecoderOutput(out);
                      if (bridge) InstallBridge(node.DetachSide(decoder.mtp_input));
                      return std::vector<at::Tensor>{decoder.main};
                    });
  Record(NodeKind::kMhcPost, phase, begin);
  Probe(NodeKind::kMhcPost, phase, mhc_post_.outputs());
  FinishLayer(mhc_post_.outputs()[0], mhc_post_.forward_no_grad());
}

void LayerSchedule::InstallBridge(const at::Tensor& leaf) {
  ChunkState& state = chunk_->state();
  // The seed's bug, in a faulty plan: the old leaf looked up where the last MTP post-process
  // cleared it.
  at::Tensor& parked =
      context_->plan->mhc_bridge_parks_gradient ? state.mhc_grad_carrier : state.mhc_multistream;
  if (parked.defined() && !parked.is_same(leaf) && parked.grad().defined() &&
      leaf.requires_grad()) {
    leaf.mutable_grad() = parked.grad();
    parked = at::Tensor();
  }
  state.mhc_multistream = leaf;
}

at::Tensor LayerSchedule::MhcPostBackward(const at::Tensor& grad) {
  const int64_t begin = SteadyNanoseconds();
  at::Tensor g = mhc_post_.Backward({grad})[0];
  Record(NodeKind::kMhcPost, Phase::kBackward, begin);
  Probe(NodeKind::kMhcPost, Phase::kBackward, {g});
  return g;
}

void LayerSchedule::MtpPostProcessForward(Phase phase) {
  const int64_t begin = SteadyNanoseconds();
  GptModel* model = context_->model;
  ChunkState& state = chunk_->state();
  const bool last = last_mtp_;
  mtp_post_.Forward({output_}, [&](ComputeNode&, const std::vector<at::Tensor>& in) {
    at::Tensor normed = model->MtpFinalNorm(*mtp_weights_, in[0]);
    state.mtp_hidden_states.push_back(normed);
    if (!last) return std::vector<at::Tensor>{normed};
    at::Tensor joined = at::cat(state.mtp_hidden_states, 0);
    state.mtp_hidden_states.clear();
    state.mhc_multistream = at::Tensor();  // as Megatron's last MTP post-process does
    return std::vector<at::Tensor>{joined};
  });
  Record(NodeKind::kMtpPostProcess, phase, begin);
  Probe(NodeKind::kMtpPostProcess, phase, mtp_post_.outputs());
  output_ = mtp_post_.outputs()[0];
  if (segment_tail_ && !output_.requires_grad()) output_.requires_grad_(true);
  ReleaseRecomputed();
}

const at::Tensor& LayerSchedule::Output() {
  if (combine_pending_ || mhc_post_pending_) {
    throw std::logic_error("overlap plan: layer " + chunk_->plan().LayerName(layer_) +
                           " (microbatch " + std::to_string(chunk_->state().microbatch) +
                           ")'s output is needed before its combine epilogue ran");
  }
  return output_;
}

at::Tensor LayerSchedule::MtpPostProcessBackward(const at::Tensor& grad) {
  const int64_t begin = SteadyNanoseconds();
  at::Tensor g = mtp_post_.Backward({grad})[0];
  Record(NodeKind::kMtpPostProcess, Phase::kBackward, begin);
  Probe(NodeKind::kMtpPostProcess, Phase::kBackward, {g});
  return g;
}

void LayerSchedule::CombineBackward(const at::Tensor& grad) {
  const int64_t begin = SteadyNanoseconds();
  at::Tensor g = combine_.Backward({grad})[0];
  Record(NodeKind::kCombine, Phase::kBackward, begin);
  Probe(NodeKind::kCombine, Phase::kBackward, {g});
  combine_comm_.StartBackward({g});
  combine_started_ = Phase::kBackward;
}

void LayerSchedule::MlpBackward() {
  std::vector<at::Tensor> g = ReturnedGrads(combine_comm_);
  const int64_t begin = SteadyNanoseconds();
  mlp_input_grads_ = mlp_.Backward(g);
  Record(NodeKind::kMlp, Phase::kBackward, begin);
  Probe(NodeKind::kMlp, Phase::kBackward, mlp_input_grads_);
}

void LayerSchedule::DispatchBackward() {
  dispatch_.StartBackward(mlp_input_grads_);
  dispatch_started_ = Phase::kBackward;
}

at::Tensor LayerSchedule::AttnBackward() {
  std::vector<at::Tensor> g = ReturnedGrads(dispatch_);
  const int64_t begin = SteadyNanoseconds();
  at::Tensor input_grad = attn_.Backward(g)[0];
  Record(NodeKind::kAttn, Phase::kBackward, begin);
  Probe(NodeKind::kAttn, Phase::kBackward, {input_grad});
  Release();
  return input_grad;
}

void LayerSchedule::RunWgrads(ops::DelayedWgrads& wgrads, NodeKind node) {
  if (wgrads.empty()) {
    throw std::logic_error(std::string("overlap plan: ") + ToString(node) + " wgrad of layer " +
                           chunk_->plan().LayerName(layer_) + ", microbatch " +
                           std::to_string(chunk_->state().microbatch) +
                           " before its backward left any weight gradient");
  }
  const int64_t begin = SteadyNanoseconds();
  wgrads.Run();
  Record(node, Phase::kWgrad, begin);
}

void LayerSchedule::ReleaseLayerState() {
  attn_.Release();
  dispatch_.Release();
  mlp_.Release();
  combine_comm_.Release();
  combine_.Release();
  mhc_post_.Release();
  routing_.reset();
  residual_ = at::Tensor();
  mlp_mhc_ = MhcMapping();
  combine_pending_ = false;
  mhc_post_pending_ = false;
}

void LayerSchedule::Release() {
  ReleaseLayerState();
  mtp_post_.Release();
  mlp_input_grads_.clear();
  output_ = at::Tensor();
}

void LayerSchedule::ReleaseRecomputed() {
  if (attn_.forward_no_grad()) ReleaseLayerState();
  if (mtp_post_.forward_no_grad()) mtp_post_.Release();
}

bool LayerSchedule::holds_tensors() const {
  return has_pending_wgrads() || attn_.holds_tensors() || dispatch_.holds_tensors() ||
         mlp_.holds_tensors() || combine_comm_.holds_tensors() || combine_.holds_tensors() ||
         mhc_post_.holds_tensors() || mtp_post_.holds_tensors() || routing_ ||
         residual_.defined() || mlp_mhc_.res.defined() || !mlp_input_grads_.empty() ||
         output_.defined();
}

}  // namespace bitparity

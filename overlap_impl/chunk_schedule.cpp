#include "overlap_impl/chunk_schedule.h"

#include <torch/torch.h>

#include <optional>
#include <stdexcept>
#include <string>
#include <utility>

#include "core/errors.h"
#include "core/flop_count.h"
#include "core/node_probes.h"
#include "core/pipeline_schedule.h"

namespace bitparity {

// ---------------------------------------------------------------------------------------------
// LayerSchedule

namespace {

// A dense layer runs the same operations as an MoE layer; its all-to-alls are null nodes.
AllToAllNode::Kind AllToAllKind(const ChunkPlan& chunk, int64_t layer) {
  return chunk.layer_is_moe[static_cast<size_t>(layer)] ? AllToAllNode::Kind::kAllToAll
                                                        : AllToAllNode::Kind::kNull;
}

// An event of the pass `chunk` runs: its node, phase, microbatch, chunk and layer.
TimelineEvent PassEvent(ChunkSchedule* chunk, NodeKind node, Phase phase, int64_t layer,
                        bool comm) {
  TimelineEvent e;
  e.node = node;
  e.phase = phase;
  e.microbatch = chunk->state().microbatch;
  e.chunk = chunk->plan().stage.chunk;
  e.layer = layer;
  e.comm = comm;
  return e;
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
  TimelineEvent e = PassEvent(chunk_, node, phase, layer_, /*comm=*/false);
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
  TimelineEvent e = PassEvent(chunk_, node.node(), phase, layer_, /*comm=*/true);
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
  if (mtp_ && mhc && !attn_.forward_no_grad()) {
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
      if (first_mtp) state.mtp_hidden_states = {in[0]};
      at::Tensor embedding = model->MtpEmbedding(&state);
      x = model->MtpPrologue(*mtp_weights_, embedding, mhc ? state.mhc_multistream : in[0]);
    }
    LayerAttentionOutput out = model->LayerAttention(*weights_, x, state, losses);
    residual_ = node.DetachSide(out.residual);
    if (mhc) {
      mlp_mhc_.res = node.DetachSide(out.mlp_mhc.res);
      mlp_mhc_.post = node.DetachSide(out.mlp_mhc.post);
    }
    if (!moe_) return std::vector<at::Tensor>{out.mlp_input};
    routing_ = out.plan;
    if (context_->stale_routing) context_->stale_routing->Remember(weights_->index, out.plan);
    std::vector<at::Tensor> outputs{out.payload.tokens, out.payload.probs};
    if (out.payload.route_mask.defined()) outputs.push_back(out.payload.route_mask);
    return outputs;
  });
  Record(NodeKind::kAttn, phase, begin);
  Probe(NodeKind::kAttn, phase, attn_.outputs());
}

void LayerSchedule::DispatchForward() {
  // attn's outputs: the tokens and their probabilities (a dense layer: the MLP input), then the
  // routing mask, which travels without gradient.
  const std::vector<at::Tensor>& out = attn_.outputs();
  const size_t carried = std::min<size_t>(out.size(), 2);
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
    at::Tensor mask = received.size() > 2 ? received[2] : at::Tensor();
    mlp_.Forward({received[0], received[1]}, [&](ComputeNode&, const std::vector<at::Tensor>& in) {
      DispatchPayload payload{in[0], in[1], mask};
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
    at::Tensor out;
    if (routing_ && context_->stale_routing) {
      at::Tensor unpermuted = context_->stale_routing->Unpermute(weights_->index, in[0]);
      out = model->LayerCombine(*weights_, unpermuted.view(residual_.sizes()), residual_, nullptr,
                                state);
    } else {
      out = model->LayerCombine(*weights_, in[0], residual_, routing_.get(), state);
    }
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

void LayerSchedule::Release() {
  attn_.Release();
  dispatch_.Release();
  mlp_.Release();
  combine_comm_.Release();
  combine_.Release();
  mhc_post_.Release();
  mtp_post_.Release();
  routing_.reset();
  residual_ = at::Tensor();
  mlp_mhc_ = MhcMapping();
  combine_pending_ = false;
  mhc_post_pending_ = false;
  mlp_input_grads_.clear();
  output_ = at::Tensor();
}

void LayerSchedule::ReleaseRecomputed() {
  if (attn_.forward_no_grad()) {
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
  if (mtp_post_.forward_no_grad()) mtp_post_.Release();
}

bool LayerSchedule::holds_tensors() const {
  return has_pending_wgrads() || attn_.holds_tensors() || dispatch_.holds_tensors() ||
         mlp_.holds_tensors() || combine_comm_.holds_tensors() || combine_.holds_tensors() ||
         mhc_post_.holds_tensors() || mtp_post_.holds_tensors() || routing_ ||
         residual_.defined() || mlp_mhc_.res.defined() || !mlp_input_grads_.empty() ||
         output_.defined();
}

// ---------------------------------------------------------------------------------------------
// RecomputeSegment

void RecomputeSegment::Run(const NodeOp& op, ChunkSchedule* chunk) {
  switch (op.phase) {
    case Phase::kCapture:
      Capture(chunk->LayerInput(op.layer, op), chunk->state());
      return;
    case Phase::kReplay:
      BeginReplay(chunk, chunk->context()->plan->replay_restores);
      return;
    case Phase::kReplayDone:  // a marker: the segment's activations are all rebuilt here
      return;
    case Phase::kRelease:
      Release();
      return;
    case Phase::kKeepGraphs:  // a faulty plan's
      for (int64_t l = spec_.first_layer; l <= spec_.last_layer(); ++l) {
        chunk->layer(l).KeepGraphsAfterBackward();
      }
      return;
    case Phase::kForward:  // operations of nodes and chunks, not of a segment
    case Phase::kBackward:
    case Phase::kFlushGrads:
    case Phase::kReleaseActivations:
    case Phase::kWgrad:
    case Phase::kWait:
      break;
  }
  throw std::logic_error(std::string("overlap plan: a segment has no operation ") +
                         ToString(op.phase));
}

void RecomputeSegment::Capture(const at::Tensor& input, const ChunkState& state) {
  input_ = input;
  snapshot_ = state;  // the tensors are never written in place: handles are a snapshot
}

void RecomputeSegment::BeginReplay(ChunkSchedule* chunk, const ChunkStateFieldFlags& restores) {
  for (ChunkStateField field : kChunkStateFields) {
    if (restores[Index(field)]) RestoreChunkStateField(field, snapshot_, &chunk->state());
  }
  if (!input_.requires_grad()) input_.requires_grad_(true);
  for (int64_t l = spec_.first_layer; l <= spec_.last_layer(); ++l) {
    chunk->layer(l).SetForwardNoGrad(false);
  }
}

void RecomputeSegment::Release() {
  input_ = at::Tensor();
  snapshot_ = ChunkState();
}

// ---------------------------------------------------------------------------------------------
// ChunkSchedule

ChunkSchedule::ChunkSchedule(OverlapContext* context, const ChunkPlan* plan, ChunkState state,
                             MicrobatchLosses* losses)
    : context_(context), plan_(plan), state_(std::move(state)), losses_(losses) {
  for (int64_t l = 0; l < plan->layers(); ++l) {
    layers_.push_back(std::make_unique<LayerSchedule>(context, this, l));
  }
  for (const LayerSegment& spec : plan->recompute.segments) {
    segments_.emplace_back(spec);
    for (int64_t l = spec.first_layer; l <= spec.last_layer(); ++l) {
      layers_[l]->SetForwardNoGrad(true);
    }
    layers_[spec.last_layer()]->set_segment_tail(true);
  }
}

void ChunkSchedule::PreProcessForward() {
  GptModel* model = context_->model;
  pre_process_.Forward({state_.input_ids}, [&](ComputeNode&, const std::vector<at::Tensor>& in) {
    return std::vector<at::Tensor>{model->Embed(in[0])};
  });
}

at::Tensor ChunkSchedule::Run(const NodeOp& op, at::Tensor grad) {
  const bool forward = op.phase == Phase::kForward;
  // The first backward operation of a pass that did not start at the loss takes the gradient
  // the next stage sent.
  if (op.phase == Phase::kBackward && gradient_receive_.valid() && op.node != NodeKind::kP2pRecv) {
    grad = WaitReceived(&gradient_receive_, Phase::kBackward);
  }
  switch (op.node) {
    case NodeKind::kPreProcess:
      if (forward) {
        PreProcessForward();
        return grad;
      }
      PreProcessBackward(grad);
      return at::Tensor();
    case NodeKind::kPostProcess:
      if (forward) {
        PostProcessForward();
        received_activation_ = at::Tensor();
        return grad;
      }
      return PostProcessBackward();
    case NodeKind::kP2pRecv:
      PostReceive(op.phase);
      return grad;
    case NodeKind::kP2pSend:
      Send(op.phase, grad);
      return at::Tensor();
    case NodeKind::kSegment:
      segments_[op.segment].Run(op, this);
      return grad;
    case NodeKind::kChunk:
      if (op.phase == Phase::kFlushGrads) {
        for (auto& layer : layers_) {
          if (layer->has_pending_wgrads()) {
            throw std::logic_error("overlap plan: microbatch " + std::to_string(state_.microbatch) +
                                   ", layer " + plan_->LayerName(layer->index()) +
                                   ": delayed weight gradients not computed before the "
                                   "gradient flush");
          }
          layer->DropKeptGraphs();
        }
        context_->model->parameters().FlushGradsToMainGrads();
        return grad;
      }
      if (op.phase == Phase::kReleaseActivations) {
        ReleaseRecomputedActivations();
        return grad;
      }
      break;
    case NodeKind::kAttn:  // a layer's nodes
    case NodeKind::kDispatch:
    case NodeKind::kMlp:
    case NodeKind::kCombine:
    case NodeKind::kCombineEpilogue:
    case NodeKind::kMhcPost:
    case NodeKind::kMtpPostProcess: {
      std::optional<FlopReplayScope> replay;  // a replay's GEMMs count as recompute
      if (op.phase == Phase::kReplay) replay.emplace();
      return layers_[op.layer]->Run(op, std::move(grad));
    }
  }
  throw std::logic_error(std::string("overlap plan: unexpected operation ") + ToString(op.node) +
                         "/" + ToString(op.phase));
}

int64_t ChunkSchedule::PeerRank(bool previous) const {
  const int64_t rank = previous ? plan_->previous_rank : plan_->next_rank;
  if (rank < 0) {
    throw std::logic_error("overlap plan: stage " + std::to_string(plan_->stage.index) +
                           " has no " + (previous ? "previous" : "next") +
                           " stage to exchange with");
  }
  return rank;
}

void ChunkSchedule::PostReceive(Phase phase) {
  Communicator* pipeline = context_->pipeline;
  if (!pipeline) throw std::logic_error("overlap plan: a pipeline receive without a pipeline");
  const ModelConfig& c = context_->model->config();
  const int64_t rows = state_.input_ids.size(0);
  const int64_t microbatches = context_->plan->microbatches;
  if (phase == Phase::kForward) {
    activation_posted_ns_ = SteadyNanoseconds();
    activation_receive_ = pipeline->StartRecv(
        {rows * plan_->input_parts, c.seq_len, c.hidden}, context_->model->compute_dtype(),
        PeerRank(/*previous=*/true),
        PipelineTag(plan_->stage.index - 1, state_.microbatch, microbatches, false));
  } else {
    gradient_posted_ns_ = SteadyNanoseconds();
    gradient_receive_ =
        pipeline->StartRecv({rows * plan_->output_parts, c.seq_len, c.hidden},
                            context_->model->compute_dtype(), PeerRank(/*previous=*/false),
                            PipelineTag(plan_->stage.index, state_.microbatch, microbatches, true));
  }
}

at::Tensor ChunkSchedule::WaitReceived(PendingTransfer* transfer, Phase phase) {
  const int64_t wait_begin = SteadyNanoseconds();
  at::Tensor received = transfer->Wait();
  *transfer = PendingTransfer();
  RecordTransfer(NodeKind::kP2pRecv, phase,
                 phase == Phase::kForward ? activation_posted_ns_ : gradient_posted_ns_,
                 wait_begin);
  return received;
}

void ChunkSchedule::Send(Phase phase, const at::Tensor& grad) {
  Communicator* pipeline = context_->pipeline;
  if (!pipeline) throw std::logic_error("overlap plan: a pipeline send without a pipeline");
  const int64_t begin = SteadyNanoseconds();
  const int64_t microbatches = context_->plan->microbatches;
  if (phase == Phase::kForward) {
    context_->sends->push_back(pipeline->StartSend(
        ChunkOutput().detach(), PeerRank(/*previous=*/false),
        PipelineTag(plan_->stage.index, state_.microbatch, microbatches, false)));
    received_activation_ = at::Tensor();
  } else {
    if (!grad.defined()) {
      throw std::logic_error("overlap plan: no input gradient to send back from stage " +
                             std::to_string(plan_->stage.index) + ", microbatch " +
                             std::to_string(state_.microbatch));
    }
    context_->sends->push_back(pipeline->StartSend(
        grad, PeerRank(/*previous=*/true),
        PipelineTag(plan_->stage.index - 1, state_.microbatch, microbatches, true)));
  }
  RecordTransfer(NodeKind::kP2pSend, phase, begin, begin);
}

void ChunkSchedule::RecordTransfer(NodeKind node, Phase phase, int64_t begin_ns,
                                   int64_t wait_begin_ns) {
  if (!context_->timeline) return;
  TimelineEvent e = PassEvent(this, node, phase, /*layer=*/-1, /*comm=*/true);
  e.begin_ns = begin_ns;
  e.wait_begin_ns = wait_begin_ns;
  e.end_ns = SteadyNanoseconds();
  context_->timeline->push_back(e);
}

at::Tensor ChunkSchedule::ChunkInput() {
  if (plan_->pre_process()) return pre_process_.outputs()[0];
  if (activation_receive_.valid()) {
    received_activation_ = WaitReceived(&activation_receive_, Phase::kForward).requires_grad_(true);
  }
  if (!received_activation_.defined()) {
    throw std::logic_error("overlap plan: stage " + std::to_string(plan_->stage.index) +
                           ", microbatch " + std::to_string(state_.microbatch) +
                           ", needs its input before its receive was posted");
  }
  return received_activation_;
}

at::Tensor ChunkSchedule::ChunkOutput() {
  return layers_.empty() ? ChunkInput() : layers_.back()->Output();
}

at::Tensor ChunkSchedule::LayerInput(int64_t layer, const NodeOp& op) {
  // A replay starts from the segment's kept input, not the no-grad output before it.
  if (op.phase == Phase::kReplay && segments_[op.segment].spec().first_layer == layer) {
    return segments_[op.segment].input();
  }
  return layer == 0 ? ChunkInput() : layers_[layer - 1]->Output();
}

void ChunkSchedule::PostProcessForward() {
  GptModel* model = context_->model;
  const int64_t depths = model->config().mtp_layers;
  const bool final_norm = plan_->final_norm_in_post_process();
  const at::Tensor hidden = ChunkOutput();
  post_process_.Forward({hidden}, [&](ComputeNode&, const std::vector<at::Tensor>& in) {
    std::vector<at::Tensor> chunks = in[0].chunk(1 + depths, 0);
    std::vector<at::Tensor> mtp(chunks.begin() + 1, chunks.end());
    // A loss stage without decoder layers runs the decoder's final norm (no MTP then).
    const at::Tensor main = final_norm ? model->FinalNorm(chunks[0]) : chunks[0];
    model->PostProcess(main, mtp, state_, losses_);
    return std::vector<at::Tensor>{losses_->objective};
  });
}

at::Tensor ChunkSchedule::PostProcessBackward() {
  at::Tensor seed =
      at::full({}, context_->model->loss_grad_scale(), post_process_.outputs()[0].options());
  losses_->objective = at::Tensor();
  return post_process_.Backward({seed})[0];
}

void ChunkSchedule::PreProcessBackward(const at::Tensor& grad) { pre_process_.Backward({grad}); }

void ChunkSchedule::ReleaseRecomputedActivations() {
  for (const LayerSegment& spec : plan_->recompute.segments) {
    for (int64_t l = spec.first_layer; l <= spec.last_layer(); ++l) layers_[l]->ReleaseOutput();
  }
}

bool ChunkSchedule::holds_tensors() const {
  if (pre_process_.holds_tensors() || post_process_.holds_tensors()) return true;
  if (received_activation_.defined() || activation_receive_.valid() || gradient_receive_.valid()) {
    return true;
  }
  for (const auto& layer : layers_) {
    if (layer->holds_tensors()) return true;
  }
  return false;
}

}  // namespace bitparity

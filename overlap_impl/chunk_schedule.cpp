#include "overlap_impl/chunk_schedule.h"

#include <torch/torch.h>

#include <optional>
#include <stdexcept>
#include <string>
#include <utility>

#include "core/clock.h"
#include "core/errors.h"
#include "numerics/flop_count.h"
#include "schedule/pipeline_schedule.h"
#include "trace/node_probes.h"

namespace bitparity {

TimelineEvent PassEvent(ChunkSchedule& chunk, NodeKind node, Phase phase, int64_t layer,
                        bool comm) {
  TimelineEvent e;
  e.node = node;
  e.phase = phase;
  e.microbatch = chunk.state().microbatch;
  e.chunk = chunk.plan().stage.chunk;
  e.layer = layer;
  e.comm = comm;
  return e;
}

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
  PipelineChannel* pipeline = context_->pipeline;
  if (!pipeline) throw std::logic_error("overlap plan: a pipeline receive without a pipeline");
  const ModelConfig& c = context_->model->config();
  const int64_t rows = state_.input_ids.size(0);
  if (phase == Phase::kForward) {
    activation_posted_ns_ = SteadyNanoseconds();
    activation_receive_ =
        pipeline->Receive({rows * plan_->input_parts, c.seq_len, plan_->input_width},
                          context_->model->compute_dtype(), PeerRank(/*previous=*/true),
                          {/*gradient=*/false, plan_->stage.index, state_.microbatch});
  } else {
    gradient_posted_ns_ = SteadyNanoseconds();
    gradient_receive_ =
        pipeline->Receive({rows * plan_->output_parts, c.seq_len, plan_->output_width},
                          context_->model->compute_dtype(), PeerRank(/*previous=*/false),
                          {/*gradient=*/true, plan_->stage.index, state_.microbatch});
  }
}

at::Tensor ChunkSchedule::WaitReceived(PendingPipelineReceive* transfer, Phase phase) {
  const int64_t wait_begin = SteadyNanoseconds();
  at::Tensor received = transfer->Wait();
  *transfer = PendingPipelineReceive();
  RecordTransfer(NodeKind::kP2pRecv, phase,
                 phase == Phase::kForward ? activation_posted_ns_ : gradient_posted_ns_,
                 wait_begin);
  return received;
}

void ChunkSchedule::Send(Phase phase, const at::Tensor& grad) {
  PipelineChannel* pipeline = context_->pipeline;
  if (!pipeline) throw std::logic_error("overlap plan: a pipeline send without a pipeline");
  const int64_t begin = SteadyNanoseconds();
  if (phase == Phase::kForward) {
    pipeline->Send(ChunkOutput().detach(), PeerRank(/*previous=*/false),
                   {/*gradient=*/false, plan_->stage.index + 1, state_.microbatch},
                   context_->sends);
    received_activation_ = at::Tensor();
  } else {
    if (!grad.defined()) {
      throw std::logic_error("overlap plan: no input gradient to send back from stage " +
                             std::to_string(plan_->stage.index) + ", microbatch " +
                             std::to_string(state_.microbatch));
    }
    pipeline->Send(grad, PeerRank(/*previous=*/true),
                   {/*gradient=*/true, plan_->stage.index - 1, state_.microbatch}, context_->sends);
  }
  RecordTransfer(NodeKind::kP2pSend, phase, begin, begin);
}

void ChunkSchedule::RecordTransfer(NodeKind node, Phase phase, int64_t begin_ns,
                                   int64_t wait_begin_ns) {
  if (!context_->timeline) return;
  TimelineEvent e = PassEvent(*this, node, phase, /*layer=*/-1, /*comm=*/true);
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

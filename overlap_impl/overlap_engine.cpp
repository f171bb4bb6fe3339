#include "overlap_impl/overlap_engine.h"

#include <torch/torch.h>

#include <stdexcept>

#include "core/memory.h"
#include "overlap_impl/faulty_plans.h"

namespace bitparity {

OverlapEngine::OverlapEngine(GptModel* model, const RecomputeConfig& recompute,
                             int64_t microbatches, const OverlapBugs& bugs)
    : model_(model),
      plan_(
          WithScheduleBugs(BuildCombinedStepPlan(model->config(), microbatches, recompute), bugs)) {
  if (bugs.stale_routing_metadata) {
    stale_routing_ = std::make_unique<StaleRoutingFault>(plan_.layers());
  }
  context_.model = model;
  context_.plan = &plan_;
  context_.stale_routing = stale_routing_.get();
}

void OverlapEngine::Replay(const NodeOp& op, ChunkSchedule& chunk) {
  const int64_t l = op.layer;
  LayerSchedule& layer = chunk.layer(l);
  RecomputeSegment& segment = chunk.segment(op.segment);
  switch (op.node) {
    case NodeKind::kAttn:
      layer.set_replaying(true);
      layer.AttnForward(l == segment.spec().first_layer ? segment.input()
                                                        : chunk.layer(l - 1).Output());
      return;
    case NodeKind::kDispatch:
      layer.DispatchForward();
      return;
    case NodeKind::kMlp:
      layer.MlpForward();
      return;
    case NodeKind::kCombine:
      layer.CombineForward();
      layer.FinishCombine();  // exposed: nothing else runs while a replay's all-to-all flies
      // A layer's replay ends with its combine, or with its MTP post-process where that is part
      // of the segment.
      if (!plan_.is_mtp(l) || !plan_.mtp_post_process_in_segment) layer.set_replaying(false);
      return;
    case NodeKind::kMtpPostProcess:
      layer.MtpPostProcessForward();
      layer.set_replaying(false);
      return;
    default:
      break;
  }
  throw std::logic_error(std::string("overlap plan: cannot replay ") + ToString(op.node));
}

void OverlapEngine::Execute(const NodeOp& op, ChunkSchedule& chunk) {
  const int64_t l = op.layer;
  const bool fwd = op.phase == Phase::kForward;
  if (op.phase == Phase::kReplay && op.node != NodeKind::kSegment) {
    Replay(op, chunk);
    return;
  }
  switch (op.node) {
    case NodeKind::kPreProcess:
      if (fwd) {
        chunk.PreProcessForward();
      } else {
        chunk.PreProcessBackward();
      }
      return;
    case NodeKind::kPostProcess:
      if (fwd) {
        chunk.PostProcessForward();
      } else {
        chunk.PostProcessBackward();
      }
      return;
    case NodeKind::kAttn:
      if (fwd) {
        chunk.layer(l).AttnForward(chunk.LayerInput(l));
      } else {
        chunk.backward_grad() = chunk.layer(l).AttnBackward();
      }
      return;
    case NodeKind::kDispatch:
      if (fwd) {
        chunk.layer(l).DispatchForward();
      } else {
        chunk.layer(l).DispatchBackward();
      }
      return;
    case NodeKind::kMlp:
      if (fwd) {
        chunk.layer(l).MlpForward();
      } else {
        chunk.layer(l).MlpBackward();
      }
      return;
    case NodeKind::kCombine:
      if (fwd) {
        chunk.layer(l).CombineForward();
      } else {
        chunk.layer(l).CombineBackward(chunk.backward_grad());
      }
      return;
    case NodeKind::kMtpPostProcess:
      if (fwd) {
        chunk.layer(l).MtpPostProcessForward();
      } else {
        chunk.backward_grad() = chunk.layer(l).MtpPostProcessBackward(chunk.backward_grad());
      }
      return;
    case NodeKind::kSegment:
      switch (op.phase) {
        case Phase::kCapture:
          chunk.segment(op.segment).Capture(chunk.LayerInput(l), chunk.state());
          return;
        case Phase::kReplay:
          chunk.segment(op.segment).BeginReplay(&chunk, plan_.replay_restores_chunk_state);
          return;
        case Phase::kReplayDone:
          chunk.segment(op.segment).EndReplay();
          return;
        case Phase::kRelease:
          chunk.segment(op.segment).Release();
          return;
        default:
          break;
      }
      break;
    case NodeKind::kChunk:
      if (op.phase == Phase::kFlushGrads) {
        model_->parameters().FlushGradsToMainGrads();
        return;
      }
      if (op.phase == Phase::kReleaseActivations) {
        chunk.ReleaseRecomputedActivations();
        return;
      }
      break;
  }
  throw std::logic_error(std::string("overlap plan: unexpected operation ") + ToString(op.node) +
                         "/" + ToString(op.phase));
}

std::vector<MicrobatchLosses> OverlapEngine::RunIteration(std::vector<ChunkState>& microbatches) {
  if (static_cast<int64_t>(microbatches.size()) != plan_.microbatches) {
    throw std::logic_error("overlap engine: plan built for " + std::to_string(plan_.microbatches) +
                           " microbatches, got " + std::to_string(microbatches.size()));
  }
  timeline_.clear();
  context_.timeline = record_timeline_ ? &timeline_ : nullptr;
  std::vector<std::unique_ptr<ChunkSchedule>> chunks;
  for (ChunkState& state : microbatches) {
    chunks.push_back(std::make_unique<ChunkSchedule>(&context_, state));
  }
  for (size_t i = 0; i < plan_.ops.size(); ++i) {
    const NodeOp& op = plan_.ops[i];
    Execute(op, *chunks[op.microbatch]);
    if (MemoryTimeline::enabled()) {
      std::string label = std::string(ToString(op.node)) + " " + ToString(op.phase) + " mb" +
                          std::to_string(op.microbatch);
      if (op.layer >= 0) label += " layer " + std::to_string(op.layer);
      if (op.segment >= 0) label += " segment " + std::to_string(op.segment);
      MemoryTimeline::Mark(label);
    }
    if (after_op) after_op(i, op, chunks);
  }
  std::vector<MicrobatchLosses> losses;
  for (auto& chunk : chunks) losses.push_back(std::move(chunk->losses()));
  return losses;
}

}  // namespace bitparity

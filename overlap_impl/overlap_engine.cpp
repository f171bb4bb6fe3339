#include "overlap_impl/overlap_engine.h"

#include <torch/torch.h>

#include <algorithm>
#include <stdexcept>
#include <utility>

#include "core/memory.h"
#include "overlap_impl/faulty_plans.h"

namespace bitparity {

OverlapEngine::OverlapEngine(GptModel* model, const ArmConfig& arm, int64_t microbatches,
                             const OverlapBugs& bugs, std::shared_ptr<Communicator> pipeline,
                             PipelineLanes lanes)
    : model_(model),
      plan_(WithScheduleBugs(PlanForArm(model->config(), model->layout().pipeline,
                                        model->layout().pp_rank, microbatches, arm),
                             bugs)),
      pipeline_(std::move(pipeline)) {
  if (plan_.pipelined() && !pipeline_) {
    throw std::logic_error("overlap engine: a pipeline of " + std::to_string(plan_.pp) +
                           " ranks needs its pipeline group");
  }
  if (bugs.stale_routing_metadata) {
    routing_ =
        std::make_unique<StaleRoutingFault>(model->config().layers + model->config().mtp_layers);
  } else {
    routing_ = std::make_unique<CarriedRouting>();
  }
  context_.model = model;
  context_.plan = &plan_;
  if (pipeline_) channel_ = std::make_unique<PipelineChannel>(pipeline_.get(), lanes);
  context_.pipeline = channel_.get();
  context_.sends = &sends_;
  context_.routing = routing_.get();
}

std::vector<std::string> OverlapEngine::warnings() const {
  std::vector<std::string> warnings;
  for (const ChunkPlan& chunk : plan_.chunks) {
    for (const std::string& w : chunk.recompute.warnings) {
      if (std::find(warnings.begin(), warnings.end(), w) == warnings.end()) warnings.push_back(w);
    }
  }
  return warnings;
}

std::vector<MicrobatchLosses> OverlapEngine::RunIteration(std::vector<ChunkState>& microbatches) {
  const int64_t count = plan_.microbatches;
  if (static_cast<int64_t>(microbatches.size()) != count) {
    throw std::logic_error("overlap engine: plan built for " + std::to_string(count) +
                           " microbatches, got " + std::to_string(microbatches.size()));
  }
  timeline_.clear();
  segment_replays_.clear();
  context_.timeline = record_timeline_ ? &timeline_ : nullptr;
  sends_.clear();
  // Every chunk of a microbatch adds its layers' aux losses (and the loss stage its losses) to
  // the microbatch's one entry.
  std::vector<MicrobatchLosses> losses(microbatches.size());
  std::vector<std::unique_ptr<ChunkSchedule>> chunks;
  for (const ChunkPlan& chunk : plan_.chunks) {
    for (int64_t m = 0; m < count; ++m) {
      chunks.push_back(std::make_unique<ChunkSchedule>(&context_, &chunk,
                                                       microbatches[static_cast<size_t>(m)],
                                                       &losses[static_cast<size_t>(m)]));
    }
  }
  // Per pass, the gradient one backward operation hands the next (Megatron's b_grad).
  std::vector<at::Tensor> grads(chunks.size());
  for (size_t i = 0; i < plan_.ops.size(); ++i) {
    const NodeOp& op = plan_.ops[i];
    const size_t pass = static_cast<size_t>(op.chunk * count + op.microbatch);
    grads[pass] = chunks[pass]->Run(op, std::move(grads[pass]));
    // At every transfer (a step's sends come at its end, the next step's receives after them):
    // sends whose bytes are through let go of their tensors.
    if (op.node == NodeKind::kP2pRecv || op.node == NodeKind::kP2pSend) {
      ReleaseCompletedSends(&sends_);
    }
    if (op.node == NodeKind::kSegment && op.phase == Phase::kReplayDone) {
      segment_replays_.push_back(
          {{op.chunk, op.microbatch, op.segment}, MemoryTracker::current_bytes()});
    }
    if (MemoryTimeline::enabled()) {
      std::string label = std::string(ToString(op.node)) + " " + ToString(op.phase) + " mb" +
                          std::to_string(op.microbatch);
      if (plan_.pipelined()) label += " chunk " + std::to_string(op.chunk);
      if (op.layer >= 0) label += " layer " + plan_.chunk(op.chunk).LayerName(op.layer);
      if (op.segment >= 0) label += " segment " + std::to_string(op.segment);
      MemoryTimeline::Mark(label);
    }
    if (after_op) after_op(i, op, chunks);
  }
  for (PendingTransfer& send : sends_) send.Wait();
  sends_.clear();
  return losses;
}

std::vector<ScheduleInterval> OverlapEngine::ScheduleTimeline() const {
  std::vector<ScheduleInterval> out;
  for (const TimelineEvent& e : timeline_) {
    const int64_t wait = e.comm && e.wait_begin_ns > 0 ? e.end_ns - e.wait_begin_ns : 0;
    out.push_back({ToString(e.node), e.microbatch, e.comm ? 1 : 0, e.begin_ns,
                   e.comm && e.completed_ns > 0 ? e.completed_ns : e.end_ns, ToString(e.phase),
                   std::max<int64_t>(0, wait)});
  }
  return out;
}

}  // namespace bitparity

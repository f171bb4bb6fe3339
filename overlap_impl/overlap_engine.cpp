#include "overlap_impl/overlap_engine.h"

#include <torch/torch.h>

#include <stdexcept>
#include <utility>

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
  // Per microbatch, the gradient one backward operation hands the next (Megatron's b_grad).
  std::vector<at::Tensor> grads(chunks.size());
  for (size_t i = 0; i < plan_.ops.size(); ++i) {
    const NodeOp& op = plan_.ops[i];
    at::Tensor& grad = grads[static_cast<size_t>(op.microbatch)];
    grad = chunks[op.microbatch]->Run(op, std::move(grad));
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

#include "overlap_impl/recompute_segment.h"

#include <stdexcept>
#include <string>

#include "overlap_impl/chunk_schedule.h"

namespace bitparity {

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

}  // namespace bitparity

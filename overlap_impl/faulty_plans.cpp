#include "overlap_impl/faulty_plans.h"

#include <utility>
#include <vector>

namespace bitparity {

CombinedStepPlan WithScheduleBugs(CombinedStepPlan plan, const OverlapBugs& bugs) {
  for (ChunkStateField field : kChunkStateFields) {
    if (bugs.skip_snapshot_restore || bugs.snapshot_skips[Index(field)]) {
      plan.replay_restores[Index(field)] = false;
    }
  }
  if (bugs.mtp_post_outside_segment) plan.mtp_post_process_in_segment = false;
  if (bugs.mhc_bridge_from_chunk_state) plan.mhc_bridge_parks_gradient = false;
  if (!bugs.mtp_post_outside_segment && !bugs.flush_per_backward_call &&
      !bugs.synchronous_all_to_all && !bugs.segment_not_released) {
    return plan;
  }
  std::vector<NodeOp> ops;
  for (const NodeOp& op : plan.ops) {
    if (bugs.mtp_post_outside_segment && op.node == NodeKind::kMtpPostProcess &&
        op.phase == Phase::kReplay) {
      continue;
    }
    ops.push_back(op);
    if (bugs.synchronous_all_to_all && IsAllToAll(op.node) &&
        (op.phase == Phase::kForward || op.phase == Phase::kReplay ||
         op.phase == Phase::kBackward)) {
      NodeOp wait = op;  // the all-to-all the operation started, waited for at once
      wait.phase = Phase::kWait;
      ops.push_back(wait);
    }
    if (bugs.segment_not_released && op.node == NodeKind::kSegment && op.phase == Phase::kReplay) {
      NodeOp keep = op;  // the replayed nodes' graphs outlive their backward
      keep.phase = Phase::kKeepGraphs;
      ops.push_back(keep);
    }
    if (bugs.flush_per_backward_call && op.phase == Phase::kBackward) {
      NodeOp flush;
      flush.node = NodeKind::kChunk;
      flush.phase = Phase::kFlushGrads;
      flush.microbatch = op.microbatch;
      flush.chunk = op.chunk;
      flush.stream = Stream::kNone;
      ops.push_back(flush);
    }
  }
  plan.ops = std::move(ops);
  return plan;
}

}  // namespace bitparity

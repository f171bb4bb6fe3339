#ifndef BITPARITY_OVERLAP_IMPL_FAULTY_PLANS_H_
#define BITPARITY_OVERLAP_IMPL_FAULTY_PLANS_H_

// Plans that re-create the silent bugs of the overlap path that live in its schedule, one at a
// time, so that the silent-bug tests can show the parity checks catch each: the runner and the
// chunk schedules only ever execute a plan, right or wrong, and hold no bug switch of their own.
// Torch-free.

#include "overlap_impl/combined_step_plan.h"
#include "overlap_impl/overlap_bugs.h"

namespace bitparity {

// `plan` with the schedule bugs of `bugs` applied:
// - mtp_post_outside_segment: a segment replay stops at the MTP layer's combine; its
//   mtp_post_process keeps its first forward's activations and is not replayed.
// - skip_snapshot_restore: a replay starts from the chunk state as it is, not the snapshot;
//   snapshot_skips: the same for the fields it flags only.
// - mhc_bridge_from_chunk_state: a replay of the mHC bridge's producer takes the gradient the
//   MTP backward left on the old bridge leaf from ChunkState::mhc_multistream, which the replayed
//   last MTP post-process cleared, instead of from the parked carrier (the seed's bug).
// - flush_per_backward_call: the main grads are flushed after every backward operation, not
//   once per microbatch, so that a tensor's gradient contributions are rounded in between.
// - synchronous_all_to_all: a wait operation after every operation that starts an all-to-all:
//   the same bits, nothing hidden (what the [[compare.overlap]] gate must catch).
// - segment_not_released: a keep_graphs operation after every segment replay: each replayed
//   node keeps its graph until the microbatch's gradient flush, so one more segment of
//   activations is live at every later replay (what the recompute census must catch).
// stale_routing_metadata is not a plan (overlap_impl/stale_routing_fault.h).
CombinedStepPlan WithScheduleBugs(CombinedStepPlan plan, const OverlapBugs& bugs);

}  // namespace bitparity

#endif  // BITPARITY_OVERLAP_IMPL_FAULTY_PLANS_H_

#ifndef BITPARITY_OVERLAP_IMPL_OVERLAP_BUGS_H_
#define BITPARITY_OVERLAP_IMPL_OVERLAP_BUGS_H_

// The overlap arm's share of the injected bugs (runtime/injected_bugs.h), which the arm turns into
// a different plan (overlap_impl/faulty_plans.h) or a replaced routing source
// (overlap_impl/stale_routing_fault.h). Four change the plan's operations (an operation dropped, a
// wait, a keep-graphs or a flush added); the snapshot skips, mhc_bridge_from_chunk_state and
// mtp_post_outside_segment change a setting of the plan that the nodes read
// (CombinedStepPlan::replay_restores, mhc_bridge_parks_gradient, mtp_post_process_in_segment),
// whose correct value every correct plan carries.

#include "model/chunk_state_field.h"

namespace bitparity {

struct OverlapBugs {
  bool stale_routing_metadata = false;  // unpermute backward reads a per-layer shared plan
  bool skip_snapshot_restore = false;   // a replay restores no field of the chunk-state snapshot
  // A replay restores every field of the snapshot but these (switch snapshot_skips_<field>).
  ChunkStateFieldFlags snapshot_skips = {};
  bool mtp_post_outside_segment = false;  // mtp_post_process left out of the recompute scope
  bool flush_per_backward_call = false;   // main-grad flush after every node backward call
  // The mHC bridge's gradient taken from the cleared chunk-state field, not the parked carrier.
  bool mhc_bridge_from_chunk_state = false;
  bool synchronous_all_to_all = false;  // every all-to-all waited for as soon as it starts
  // A replayed segment's graph outlives its backward: kept until the microbatch's flush.
  bool segment_not_released = false;

  bool any() const {
    bool skips = false;
    for (bool skip : snapshot_skips) skips = skips || skip;
    return stale_routing_metadata || skip_snapshot_restore || skips || mtp_post_outside_segment ||
           flush_per_backward_call || mhc_bridge_from_chunk_state || synchronous_all_to_all ||
           segment_not_released;
  }
};

}  // namespace bitparity

#endif  // BITPARITY_OVERLAP_IMPL_OVERLAP_BUGS_H_

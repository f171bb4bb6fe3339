#ifndef BITPARITY_MODEL_INJECTED_BUGS_H_
#define BITPARITY_MODEL_INJECTED_BUGS_H_

// Test hooks that bring back, one at a time, the silent bugs met while building the overlap path
// (and the seed's own), so that tests can show the parity checks catch
// each of them. Off unless a test sets them, or BITPARITY_INJECT_BUG names them (comma-separated)
// in a rank's environment (parsed with the other developer switches, runtime/debug_switches.h).
// None is read on the algorithm's lines: the model takes its share through its constructor, the
// overlap arm turns its share into a different plan (overlap_impl/faulty_plans.h) or a fault of
// its own (overlap_impl/stale_routing_fault.h).

#include "model/chunk_state_field.h"

namespace bitparity {

// The model's share, in both arms.
struct ModelBugs {
  bool composite_rms_norm = false;     // RMSNorm's input reached by two autograd edges
  bool aux_loss_in_objective = false;  // aux loss added to the loss instead of injected

  bool any() const { return composite_rms_norm || aux_loss_in_objective; }
};

// The training loop's share: nondeterminism of two kinds, for the attribution of a run that does
// not reproduce itself (harness/attribution.h). Both add the grad norm's squared sums in the
// order the intra-op threads finish them; the kernel's racy path is taken only while
// deterministic algorithms are not forced, and under it the rank does not force them.
struct RuntimeBugs {
  bool thread_order_reduction = false;   // a reduction whose order depends on the threads
  bool nondeterministic_kernel = false;  // a kernel with a deterministic alternative not forced

  bool any() const { return thread_order_reduction || nondeterministic_kernel; }
};

// The overlap arm's share.
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

struct InjectedBugs {
  ModelBugs model;
  OverlapBugs overlap;
  RuntimeBugs runtime;

  bool any() const { return model.any() || overlap.any() || runtime.any(); }
};

}  // namespace bitparity

#endif  // BITPARITY_MODEL_INJECTED_BUGS_H_

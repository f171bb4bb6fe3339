#ifndef BITPARITY_MODEL_INJECTED_BUGS_H_
#define BITPARITY_MODEL_INJECTED_BUGS_H_

// Test hooks that bring back, one at a time, the silent bugs met while building the overlap path
// (research/parity-prototype.md and the seed), so that tests can show the parity checks catch
// each of them. Off unless a test sets them, or BITPARITY_INJECT_BUG names them (comma-separated)
// in a rank's environment.

#include <string>

namespace bitparity {

struct InjectedBugs {
  // Overlap arm.
  bool stale_routing_metadata = false;    // unpermute backward reads a per-layer shared plan
  bool skip_snapshot_restore = false;     // a replay does not restore the chunk-state snapshot
  bool mtp_post_outside_segment = false;  // mtp_post_process left out of the recompute scope
  bool flush_per_backward_call = false;   // main-grad flush after every node backward call
  // Model (both arms).
  bool composite_rms_norm = false;     // RMSNorm's input reached by two autograd edges
  bool aux_loss_in_objective = false;  // aux loss added to the loss instead of injected

  // Parses comma-separated names; InputError names an unknown one.
  static InjectedBugs Parse(const std::string& names);
  bool any() const;
};

}  // namespace bitparity

#endif  // BITPARITY_MODEL_INJECTED_BUGS_H_

#ifndef BITPARITY_RUNTIME_INJECTED_BUGS_H_
#define BITPARITY_RUNTIME_INJECTED_BUGS_H_

// Test hooks that bring back, one at a time, the silent bugs met while building the overlap path
// (and the seed's own), so that tests can show the parity checks catch each of them. Off unless
// a test sets them, or BITPARITY_INJECT_BUG names them (comma-separated) in a rank's environment
// (runtime/debug_switches.h, which parses them into runtime/injected_bugs.h's InjectedBugs).
// Here: the training loop's share, and all three shares together.

#include "model/model_bugs.h"
#include "overlap_impl/overlap_bugs.h"

namespace bitparity {

// The training loop's share: nondeterminism of two kinds, for the attribution of a run that does
// not reproduce itself (harness/attribution.h); the pipeline's one lane; and checkpoints that
// lose state. Both add the grad norm's squared sums in the
// order the intra-op threads finish them; the kernel's racy path is taken only while
// deterministic algorithms are not forced, and under it the rank does not force them.
struct RuntimeBugs {
  bool thread_order_reduction = false;   // a reduction whose order depends on the threads
  bool nondeterministic_kernel = false;  // a kernel with a deterministic alternative not forced
  // Pipeline activations and gradients on one in-order lane per pair of ranks
  // (comm/pipeline_channel.h): a receive can take another pass's tensor.
  bool pipeline_one_lane = false;
  // A checkpoint (runtime/checkpoint.h) that loses one piece of state, as resumed trainers do: the
  // optimizer's step count, the LR schedule's position, the data position (each saved as 0), or
  // the fp32 masters (saved rounded to the compute weights' dtype).
  bool checkpoint_drops_optimizer_steps = false;
  bool checkpoint_drops_lr_position = false;
  bool checkpoint_resets_data_position = false;
  bool checkpoint_masters_in_training_dtype = false;

  bool any() const {
    return thread_order_reduction || nondeterministic_kernel || pipeline_one_lane ||
           checkpoint_drops_optimizer_steps || checkpoint_drops_lr_position ||
           checkpoint_resets_data_position || checkpoint_masters_in_training_dtype;
  }
};

struct InjectedBugs {
  ModelBugs model;
  OverlapBugs overlap;
  RuntimeBugs runtime;

  bool any() const { return model.any() || overlap.any() || runtime.any(); }
};

}  // namespace bitparity

#endif  // BITPARITY_RUNTIME_INJECTED_BUGS_H_

#ifndef BITPARITY_RUNTIME_DEBUG_SWITCHES_H_
#define BITPARITY_RUNTIME_DEBUG_SWITCHES_H_

// Developer switches read from the environment of a rank process (docs/developer.md):
//   BITPARITY_FAULT="crash|segv|hang|error|startup,rank=R[,iteration=I]"
//       makes rank R abort, segfault, hang, exit 1, or exit 1 before joining the group, at the
//       start of iteration I (default 1). Used by the launcher's fault tests.
//   BITPARITY_PERTURB="rank=R,iteration=I,param=NAME,element=K[,ulps=N]"
//       adds N (default 1) units in the last place to element K of NAME's main grad on rank R
//       at iteration I, after the data-parallel reduction.
//   BITPARITY_INJECT_BUG="NAME[,NAME...]"
//       re-creates known silent bugs (runtime/injected_bugs.h) so that a test can show the parity
//       checks catch each: stale_routing_metadata, skip_snapshot_restore,
//       snapshot_skips_<field> (one chunk-state field, model/chunk_state_field.h),
//       mtp_post_outside_segment, flush_per_backward_call, mhc_bridge_from_chunk_state,
//       synchronous_all_to_all, segment_not_released, composite_rms_norm,
//       aux_loss_in_objective, thread_order_reduction, nondeterministic_kernel,
//       pipeline_one_lane, checkpoint_drops_optimizer_steps, checkpoint_drops_lr_position,
//       checkpoint_resets_data_position, checkpoint_masters_in_training_dtype.
// Their grammar is comm/developer_switches.h's (torch-free: the launcher checks them before any
// rank starts); the rank process reads them once, at its start.

#include <cstdint>
#include <string>

#include "comm/developer_switches.h"
#include "runtime/injected_bugs.h"

namespace bitparity {

// Maps BITPARITY_INJECT_BUG's names (comm/developer_switches.h checks them) to their flags.
InjectedBugs ParseInjectedBugs(const std::string& text);

// Every developer switch of a rank process.
struct DebugSwitches {
  FaultPlan fault;
  GradPerturbation perturbation;
  InjectedBugs bugs;
};

// Reads BITPARITY_FAULT, BITPARITY_PERTURB and BITPARITY_INJECT_BUG from the environment.
DebugSwitches ReadDebugSwitches();

// Carries out `plan` if it targets (rank, iteration); returns otherwise.
void MaybeInjectFault(const FaultPlan& plan, int64_t rank, int64_t iteration);

}  // namespace bitparity

#endif  // BITPARITY_RUNTIME_DEBUG_SWITCHES_H_

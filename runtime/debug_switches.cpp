#include "runtime/debug_switches.h"

#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>

#include "comm/rank_protocol.h"
#include "core/errors.h"

namespace bitparity {

InjectedBugs ParseInjectedBugs(const std::string& text) {
  struct Switch {
    const char* name;
    bool* flag;
  };
  InjectedBugs bugs;
  const Switch switches[] = {
      {"stale_routing_metadata", &bugs.overlap.stale_routing_metadata},
      {"skip_snapshot_restore", &bugs.overlap.skip_snapshot_restore},
      {"mtp_post_outside_segment", &bugs.overlap.mtp_post_outside_segment},
      {"flush_per_backward_call", &bugs.overlap.flush_per_backward_call},
      {"mhc_bridge_from_chunk_state", &bugs.overlap.mhc_bridge_from_chunk_state},
      {"synchronous_all_to_all", &bugs.overlap.synchronous_all_to_all},
      {"segment_not_released", &bugs.overlap.segment_not_released},
      {"thread_order_reduction", &bugs.runtime.thread_order_reduction},
      {"nondeterministic_kernel", &bugs.runtime.nondeterministic_kernel},
      {"pipeline_one_lane", &bugs.runtime.pipeline_one_lane},
      {"checkpoint_drops_optimizer_steps", &bugs.runtime.checkpoint_drops_optimizer_steps},
      {"checkpoint_drops_lr_position", &bugs.runtime.checkpoint_drops_lr_position},
      {"checkpoint_resets_data_position", &bugs.runtime.checkpoint_resets_data_position},
      {"checkpoint_masters_in_training_dtype", &bugs.runtime.checkpoint_masters_in_training_dtype},
      {"composite_rms_norm", &bugs.model.composite_rms_norm},
      {"aux_loss_in_objective", &bugs.model.aux_loss_in_objective},
  };
  std::vector<std::pair<std::string, bool*>> named;
  for (const Switch& s : switches) named.emplace_back(s.name, s.flag);
  for (ChunkStateField field : kChunkStateFields) {
    named.emplace_back(std::string("snapshot_skips_") + ToString(field),
                       &bugs.overlap.snapshot_skips[Index(field)]);
  }
  for (const std::string& name : ParseInjectedBugNames(text)) {
    bool known = false;
    for (const auto& [switch_name, flag] : named) {
      if (name == switch_name) *flag = known = true;
    }
    if (!known) {  // comm/developer_switches.cpp lists a bug that has no flag here
      throw std::logic_error(std::string(kInjectBugVariable) + ": bug '" + name +
                             "' has no flag in runtime/injected_bugs.h");
    }
  }
  return bugs;
}

DebugSwitches ReadDebugSwitches() {
  auto read = [](const char* name) {
    const char* value = std::getenv(name);
    return std::string(value ? value : "");
  };
  DebugSwitches switches;
  switches.fault = ParseFaultPlan(read(kFaultVariable));
  switches.perturbation = ParseGradPerturbation(read(kPerturbVariable));
  switches.bugs = ParseInjectedBugs(read(kInjectBugVariable));
  return switches;
}

void MaybeInjectFault(const FaultPlan& plan, int64_t rank, int64_t iteration) {
  if (plan.kind == FaultKind::kNone) return;
  if (plan.rank != FaultPlan::kEveryRank && plan.rank != rank) return;
  if (plan.kind == FaultKind::kStartup) {
    if (iteration != 0) return;
    std::fprintf(stderr, "fault injection: rank %lld fails at start-up\n",
                 static_cast<long long>(rank));
    std::fflush(stderr);
    std::_Exit(1);
  }
  if (iteration != plan.iteration) return;
  std::fprintf(stderr, "fault injection: rank %lld, iteration %lld\n", static_cast<long long>(rank),
               static_cast<long long>(iteration));
  std::fflush(stderr);
  switch (plan.kind) {
    case FaultKind::kCrash:
      std::abort();
    case FaultKind::kSegv:
      std::raise(SIGSEGV);
      break;
    case FaultKind::kHang:
      for (;;) ::pause();
    case FaultKind::kError:
      throw std::runtime_error("injected error");
    default:
      break;
  }
}

}  // namespace bitparity

#include "model/injected_bugs.h"

#include <sstream>

#include "core/errors.h"

namespace bitparity {

InjectedBugs InjectedBugs::Parse(const std::string& names) {
  InjectedBugs bugs;
  std::stringstream in(names);
  std::string name;
  while (std::getline(in, name, ',')) {
    if (name.empty()) continue;
    if (name == "stale_routing_metadata") {
      bugs.stale_routing_metadata = true;
    } else if (name == "skip_snapshot_restore") {
      bugs.skip_snapshot_restore = true;
    } else if (name == "mtp_post_outside_segment") {
      bugs.mtp_post_outside_segment = true;
    } else if (name == "flush_per_backward_call") {
      bugs.flush_per_backward_call = true;
    } else if (name == "composite_rms_norm") {
      bugs.composite_rms_norm = true;
    } else if (name == "aux_loss_in_objective") {
      bugs.aux_loss_in_objective = true;
    } else {
      throw InputError("BITPARITY_INJECT_BUG: unknown bug '" + name +
                       "' (known: stale_routing_metadata, skip_snapshot_restore, "
                       "mtp_post_outside_segment, flush_per_backward_call, composite_rms_norm, "
                       "aux_loss_in_objective)");
    }
  }
  return bugs;
}

bool InjectedBugs::any() const {
  return stale_routing_metadata || skip_snapshot_restore || mtp_post_outside_segment ||
         flush_per_backward_call || composite_rms_norm || aux_loss_in_objective;
}

}  // namespace bitparity

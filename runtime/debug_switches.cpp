#include "runtime/debug_switches.h"

#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <sstream>

#include "comm/rank_protocol.h"
#include "core/errors.h"

namespace bitparity {
namespace {

// "word,key=value,key=value" -> {"" : word, key : value, ...}
std::map<std::string, std::string> ParseFields(const std::string& variable,
                                               const std::string& text) {
  std::map<std::string, std::string> fields;
  std::stringstream in(text);
  std::string part;
  bool first = true;
  while (std::getline(in, part, ',')) {
    size_t eq = part.find('=');
    if (eq == std::string::npos) {
      if (!first) throw InputError(variable + ": expected key=value, got '" + part + "'");
      fields[""] = part;
    } else {
      fields[part.substr(0, eq)] = part.substr(eq + 1);
    }
    first = false;
  }
  return fields;
}

int64_t ParseField(const std::string& variable, const std::map<std::string, std::string>& fields,
                   const std::string& key, int64_t fallback, bool required) {
  auto it = fields.find(key);
  if (it == fields.end()) {
    if (required) throw InputError(variable + ": '" + key + "=' is required");
    return fallback;
  }
  try {
    size_t used = 0;
    long long v = std::stoll(it->second, &used);
    if (used != it->second.size()) throw std::invalid_argument(it->second);
    return v;
  } catch (const std::exception&) {
    throw InputError(variable + ": " + key + " must be an integer, got '" + it->second + "'");
  }
}

}  // namespace

FaultPlan ParseFaultPlan(const std::string& text) {
  FaultPlan plan;
  if (text.empty()) return plan;
  const std::string var = kFaultVariable;
  auto fields = ParseFields(var, text);
  static const std::map<std::string, FaultKind> kKinds = {{"crash", FaultKind::kCrash},
                                                          {"segv", FaultKind::kSegv},
                                                          {"hang", FaultKind::kHang},
                                                          {"error", FaultKind::kError},
                                                          {"startup", FaultKind::kStartup}};
  auto kind = kKinds.find(fields[""]);
  if (kind == kKinds.end()) {
    throw InputError(var + ": kind must be crash, segv, hang, error or startup, got '" +
                     fields[""] + "'");
  }
  plan.kind = kind->second;
  if (fields.count("rank") && fields["rank"] == "all") {
    plan.rank = FaultPlan::kEveryRank;
  } else {
    plan.rank = ParseField(var, fields, "rank", 0, true);
    if (plan.rank < 0) throw InputError(var + ": rank must be >= 0 or 'all'");
  }
  plan.iteration = ParseField(var, fields, "iteration", 1, false);
  for (const auto& [key, value] : fields) {
    if (key != "" && key != "rank" && key != "iteration") {
      throw InputError(var + ": unknown key '" + key + "'");
    }
  }
  return plan;
}

GradPerturbation ParseGradPerturbation(const std::string& text) {
  GradPerturbation p;
  if (text.empty()) return p;
  const std::string var = kPerturbVariable;
  auto fields = ParseFields(var, text);
  if (fields.count("")) throw InputError(var + ": expected only key=value fields");
  p.rank = ParseField(var, fields, "rank", 0, true);
  p.iteration = ParseField(var, fields, "iteration", 0, true);
  p.element = ParseField(var, fields, "element", 0, true);
  p.ulps = ParseField(var, fields, "ulps", 1, false);
  if (!fields.count("param") || fields["param"].empty())
    throw InputError(var + ": 'param=' is required");
  p.param = fields["param"];
  for (const auto& [key, value] : fields) {
    if (key != "rank" && key != "iteration" && key != "element" && key != "ulps" &&
        key != "param") {
      throw InputError(var + ": unknown key '" + key + "'");
    }
  }
  if (p.rank < 0) throw InputError(var + ": rank must be >= 0");
  return p;
}

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
  std::stringstream in(text);
  std::string name;
  while (std::getline(in, name, ',')) {
    if (name.empty()) continue;
    bool known = false;
    for (const auto& [switch_name, flag] : named) {
      if (name == switch_name) *flag = known = true;
    }
    if (!known) {
      std::string names;
      for (const auto& entry : named) names += (names.empty() ? "" : ", ") + entry.first;
      throw InputError(std::string(kInjectBugVariable) + ": unknown bug '" + name +
                       "' (known: " + names + ")");
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

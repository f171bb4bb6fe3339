#include "comm/rank_protocol.h"

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <map>
#include <sstream>
#include <type_traits>

namespace bitparity {
namespace {

constexpr char kRankIdentityTag[] = "@rank ";
constexpr char kProgressTag[] = "@progress ";

// The key=value fields of a tagged line; nullopt when `line` does not start with `tag`.
std::optional<std::map<std::string, std::string>> TaggedFields(const std::string& line,
                                                               const std::string& tag) {
  if (line.rfind(tag, 0) != 0) return std::nullopt;
  std::map<std::string, std::string> fields;
  std::istringstream in(line.substr(tag.size()));
  std::string field;
  while (in >> field) {
    const size_t eq = field.find('=');
    if (eq != std::string::npos) fields[field.substr(0, eq)] = field.substr(eq + 1);
  }
  return fields;
}

// Reads an integer or floating-point field of `fields` into `out` when present; false when the
// field is there but does not parse completely.
template <typename T>
bool ReadField(const std::map<std::string, std::string>& fields, const char* key, T* out) {
  auto it = fields.find(key);
  if (it == fields.end()) return true;
  try {
    size_t used = 0;
    if constexpr (std::is_floating_point_v<T>) {
      *out = std::stod(it->second, &used);
    } else {
      *out = std::stoll(it->second, &used);
    }
    return used == it->second.size();
  } catch (const std::exception&) {
    return false;
  }
}

}  // namespace

std::vector<std::string> WorkerArguments(const WorkerRequest& request) {
  std::vector<std::string> args = {kWorkerCommand, kWorkerFlagRecipe, request.recipe_path,
                                   kWorkerFlagArm, request.arm,       kWorkerFlagOutDir,
                                   request.out_dir};
  if (!request.dump_at.empty()) {
    std::string list;
    for (int64_t it : request.dump_at) list += (list.empty() ? "" : ",") + std::to_string(it);
    args.insert(args.end(), {kWorkerFlagDumpAt, list});
  }
  if (request.stop_after > 0) {
    args.insert(args.end(), {kWorkerFlagStopAfter, std::to_string(request.stop_after)});
  }
  if (request.memory_timeline) args.push_back(kWorkerFlagMemoryTimeline);
  if (request.check_switches_only) args.push_back(kWorkerFlagCheckSwitches);
  if (request.probes) args.push_back(kWorkerFlagProbes);
  if (request.threads > 0) {
    args.insert(args.end(), {kWorkerFlagThreads, std::to_string(request.threads)});
  }
  if (request.deterministic_algorithms) args.push_back(kWorkerFlagDeterministicAlgorithms);
  if (!request.checkpoint_at.empty()) {
    std::string list;
    for (int64_t it : request.checkpoint_at) list += (list.empty() ? "" : ",") + std::to_string(it);
    args.insert(args.end(), {kWorkerFlagCheckpointAt, list});
  }
  if (!request.checkpoint_dir.empty()) {
    args.insert(args.end(), {kWorkerFlagCheckpointDir, request.checkpoint_dir});
  }
  if (!request.resume_from.empty()) {
    args.insert(args.end(), {kWorkerFlagResumeFrom, request.resume_from});
  }
  if (!request.recipe_digest.empty()) {
    args.insert(args.end(), {kWorkerFlagRecipeDigest, request.recipe_digest});
  }
  return args;
}

std::vector<std::pair<std::string, std::string>> ExternalRankVariables(
    const WorkerRequest& request) {
  std::vector<std::pair<std::string, std::string>> out = {
      {kExternalRecipeVariable, request.recipe_path},
      {kExternalArmVariable, request.arm},
      {kExternalOutDirVariable, request.out_dir}};
  if (!request.recipe_digest.empty()) {
    out.emplace_back(kExternalRecipeDigestVariable, request.recipe_digest);
  }
  if (!request.dump_at.empty()) {
    std::string list;
    for (int64_t it : request.dump_at) list += (list.empty() ? "" : ",") + std::to_string(it);
    out.emplace_back(kExternalDumpAtVariable, list);
  }
  if (request.stop_after > 0) {
    out.emplace_back(kExternalStopAfterVariable, std::to_string(request.stop_after));
  }
  if (request.memory_timeline) out.emplace_back(kExternalMemoryTimelineVariable, "1");
  if (request.probes) out.emplace_back(kExternalProbesVariable, "1");
  if (request.threads > 0)
    out.emplace_back(kExternalThreadsVariable, std::to_string(request.threads));
  if (request.deterministic_algorithms) {
    out.emplace_back(kExternalDeterministicAlgorithmsVariable, "1");
  }
  return out;
}

std::string RankPartFileName(int64_t rank) {
  char name[32];
  std::snprintf(name, sizeof(name), "rank_%05lld.h5", static_cast<long long>(rank));
  return name;
}

std::string FormatRankIdentityLine(const RankIdentity& identity) {
  char line[128];
  std::snprintf(line, sizeof(line), "%srank=%lld pid=%lld pgid=%lld", kRankIdentityTag,
                static_cast<long long>(identity.rank), static_cast<long long>(identity.pid),
                static_cast<long long>(identity.process_group));
  return line;
}

std::optional<RankIdentity> ParseRankIdentityLine(const std::string& line) {
  auto fields = TaggedFields(line, kRankIdentityTag);
  if (!fields || !fields->count("rank") || !fields->count("pid") || !fields->count("pgid")) {
    return std::nullopt;
  }
  RankIdentity identity;
  if (!ReadField(*fields, "rank", &identity.rank) || !ReadField(*fields, "pid", &identity.pid) ||
      !ReadField(*fields, "pgid", &identity.process_group)) {
    return std::nullopt;
  }
  return identity;
}

std::string FormatProgressLine(const ProgressEvent& event) {
  char line[256];
  std::snprintf(line, sizeof(line),
                "%siteration=%lld iterations=%lld loss=%.6f grad_norm=%.6g lr=%.6g "
                "step_seconds=%.4f peak_bytes=%lld",
                kProgressTag, static_cast<long long>(event.iteration),
                static_cast<long long>(event.iterations), event.loss, event.grad_norm,
                event.learning_rate, event.step_seconds, static_cast<long long>(event.peak_bytes));
  return line;
}

std::optional<ProgressEvent> ParseProgressLine(const std::string& line) {
  auto fields = TaggedFields(line, kProgressTag);
  if (!fields) return std::nullopt;
  ProgressEvent event;
  if (!ReadField(*fields, "iteration", &event.iteration) ||
      !ReadField(*fields, "iterations", &event.iterations) ||
      !ReadField(*fields, "loss", &event.loss) ||
      !ReadField(*fields, "grad_norm", &event.grad_norm) ||
      !ReadField(*fields, "lr", &event.learning_rate) ||
      !ReadField(*fields, "step_seconds", &event.step_seconds) ||
      !ReadField(*fields, "peak_bytes", &event.peak_bytes)) {
    return std::nullopt;
  }
  return event;
}

std::vector<std::string> ActiveDeveloperSwitches() {
  std::vector<std::string> active;
  for (const char* name : {kFaultVariable, kPerturbVariable, kInjectBugVariable}) {
    const char* value = std::getenv(name);
    if (value != nullptr && *value != '\0') active.push_back(std::string(name) + "=" + value);
  }
  return active;
}

}  // namespace bitparity

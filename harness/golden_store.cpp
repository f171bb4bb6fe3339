#include "harness/golden_store.h"

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <vector>

#include "core/clock.h"
#include "core/errors.h"
#include "harness/isolated_trace_read.h"
#include "trace/trace_keys.h"

namespace bitparity {
namespace {

namespace fs = std::filesystem;

size_t FieldsDiffering(const Fingerprint& a, const Fingerprint& b) {
  const std::string fields = a.DifferingFields(b);
  return fields.empty() ? 0
                        : 1 + static_cast<size_t>(std::count(fields.begin(), fields.end(), ','));
}

bool SameWorldAndThreads(const Fingerprint& a, const Fingerprint& b) {
  for (const char* field : {"world_size", "threads_per_rank"}) {
    auto ia = a.fields.find(field);
    auto ib = b.fields.find(field);
    if (ia == a.fields.end() || ib == b.fields.end() || ia->second != ib->second) return false;
  }
  return true;
}

std::string DefaultGoldenDir(const std::string& recipe_path) {
  fs::path dir = fs::absolute(recipe_path).parent_path();
  if (dir.filename() == "recipes") return (dir.parent_path() / "golden").string();
  return (dir / "golden").string();
}

}  // namespace

GoldenStore::GoldenStore(const std::string& dir, const std::string& recipe_path)
    : dir_(dir.empty() ? DefaultGoldenDir(recipe_path) : dir) {}

std::string GoldenStore::PathFor(const std::string& recipe_name,
                                 const Fingerprint& fingerprint) const {
  return (fs::path(dir_) / recipe_name / (fingerprint.key + ".h5")).string();
}

GoldenLookup GoldenStore::Find(const std::string& recipe_name,
                               const Fingerprint& fingerprint) const {
  GoldenLookup lookup;
  const fs::path recipe_dir = fs::path(dir_) / recipe_name;
  lookup.path = PathFor(recipe_name, fingerprint);
  if (fs::exists(lookup.path)) {
    try {
      lookup.golden = ReadTraceIsolated(lookup.path);
    } catch (const InputError& e) {
      throw InputError(std::string("golden unusable (left unchanged): ") + e.what());
    }
    return lookup;
  }
  std::string others;
  std::error_code ec;
  std::vector<fs::path> files;
  if (fs::is_directory(recipe_dir, ec)) {
    for (const auto& entry : fs::directory_iterator(recipe_dir, ec)) {
      if (entry.path().extension() == ".h5") files.push_back(entry.path());
    }
  }
  std::sort(files.begin(), files.end());
  size_t nearest_distance = SIZE_MAX;
  for (const fs::path& file : files) {
    std::string why;
    try {
      Trace other = ReadTraceIsolated(file.string());
      const Fingerprint other_fingerprint = TraceFingerprint(other);
      why = "differs in " + fingerprint.DifferingFields(other_fingerprint);
      lookup.others_exist = true;
      const size_t distance = FieldsDiffering(fingerprint, other_fingerprint);
      if (SameWorldAndThreads(fingerprint, other_fingerprint) && distance < nearest_distance) {
        nearest_distance = distance;
        lookup.nearest = std::move(other);
        lookup.nearest_path = file.string();
      }
    } catch (const InputError&) {
      why = "unreadable";
    }
    others += (others.empty() ? "" : "; ") + file.filename().string() + " (" + why + ")";
  }
  lookup.missing_reason = "no golden for this machine's fingerprint " + fingerprint.key + " in " +
                          recipe_dir.string() + (others.empty() ? "" : "; found " + others);
  return lookup;
}

void GoldenStore::Replace(const std::string& path, Trace baseline_run,
                          const Fingerprint& fingerprint, const std::string& command_line) const {
  std::map<std::string, std::string>& attributes = baseline_run.attributes;
  attributes[trace_keys::kGoldenFingerprint] = fingerprint.key;
  for (const auto& [field, value] : fingerprint.fields) {
    attributes[trace_keys::kGoldenFingerprint + std::string(".") + field] = value;
  }
  const std::map<std::string, std::string>& rank0 = baseline_run.ranks.at(0).attributes;
  auto revision = rank0.find(trace_keys::kProvenanceGitRevision);
  attributes[trace_keys::kGoldenGitRevision] =
      revision != rank0.end() ? revision->second : "unknown";
  attributes[trace_keys::kGoldenCreatedUtc] = UtcTimestamp();
  attributes[trace_keys::kGoldenCommandLine] = command_line;
  std::error_code ec;
  fs::create_directories(fs::path(path).parent_path(), ec);
  if (ec) {
    throw InfrastructureError(fs::path(path).parent_path().string() +
                              ": cannot create the golden directory: " + ec.message());
  }
  WriteTrace(path, baseline_run);
}

}  // namespace bitparity

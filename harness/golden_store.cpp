#include "harness/golden_store.h"

#include <filesystem>

#include "core/clock.h"
#include "core/errors.h"
#include "core/trace_keys.h"

namespace bitparity {
namespace {

namespace fs = std::filesystem;

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
  if (fs::is_directory(recipe_dir, ec)) {
    for (const auto& entry : fs::directory_iterator(recipe_dir, ec)) {
      if (entry.path().extension() != ".h5") continue;
      std::string why;
      try {
        Fingerprint other = TraceFingerprint(ReadTraceIsolated(entry.path().string()));
        why = "differs in " + fingerprint.DifferingFields(other);
      } catch (const InputError&) {
        why = "unreadable";
      }
      others += (others.empty() ? "" : "; ") + entry.path().filename().string() + " (" + why + ")";
    }
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

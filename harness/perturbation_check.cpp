#include "harness/perturbation_check.h"

#include <cstdlib>
#include <filesystem>
#include <set>
#include <utility>

#include "comm/rank_protocol.h"
#include "core/errors.h"
#include "core/temporary_mark.h"
#include "harness/launcher.h"

namespace bitparity {
namespace {

namespace fs = std::filesystem;

// The temporary folder of the check's logs and ranks' folder, removed with this object.
class CheckFolder {
 public:
  CheckFolder()
      : path_(fs::temp_directory_path() / ("bitparity-switch-check.tmp." + ThisProcessMark())) {}
  ~CheckFolder() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  CheckFolder(const CheckFolder&) = delete;
  CheckFolder& operator=(const CheckFolder&) = delete;
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

// Starts `arm`'s ranks with --check-switches (and BITPARITY_PERTURB=`spec` when not empty);
// InputError with the first failing rank's words when one refuses its input.
void CheckArm(const Recipe& recipe, const std::string& arm, const std::string& spec,
              const std::string& source, const fs::path& folder) {
  LaunchOptions launch = ArmLaunch(recipe, arm, (folder / arm / "trace.h5").string());
  launch.worker.check_switches_only = true;
  launch.merge_trace = false;
  if (!spec.empty()) launch.environment.push_back({kPerturbVariable, spec});
  const LaunchResult result = LaunchArm(launch);
  // Interrupted (128 + the signal): the runs that follow see the signal and report it, as an
  // interrupt at any other point of `run` is reported.
  if (result.exit_code == kExitPass || result.exit_code > 128) return;
  const std::string said = FirstLine(result.failure);
  if (result.exit_code == kExitBadInput) {
    throw InputError(source + " cannot apply to arm '" + arm + "': " + said);
  }
  throw InfrastructureError("checking " + source + " against arm '" + arm +
                            "''s model failed: " + said);
}

}  // namespace

void CheckPerturbationTargets(const Recipe& recipe, const std::vector<std::string>& arms,
                              const std::vector<Perturbation>& perturbations) {
  std::set<std::pair<std::string, std::string>> checks;  // (arm, spec); "" inherits the variable
  std::vector<std::pair<std::string, std::string>> order;
  std::vector<std::string> sources;
  auto add = [&](const std::string& arm, const std::string& spec, const std::string& source) {
    if (recipe.arm(arm).engine == EngineKind::kExternal) return;  // its program checks its own
    if (!checks.insert({arm, spec}).second) return;
    order.emplace_back(arm, spec);
    sources.push_back(source);
  };
  const char* inherited = std::getenv(kPerturbVariable);
  if (inherited != nullptr && *inherited != '\0') {
    for (const std::string& arm : arms) add(arm, "", kPerturbVariable);
  }
  for (const Perturbation& p : perturbations) add(p.arm, p.spec, "--perturb '" + p.text + "'");
  if (order.empty()) return;
  const CheckFolder folder;
  for (size_t i = 0; i < order.size(); ++i) {
    CheckArm(recipe, order[i].first, order[i].second, sources[i], folder.path());
  }
}

}  // namespace bitparity

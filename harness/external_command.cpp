#include "harness/external_command.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "core/errors.h"
#include "harness/process.h"
#include "numerics/determinism.h"

namespace bitparity {
namespace {

namespace fs = std::filesystem;

constexpr char kPythonInterpreterArgument[] = "{python}";
constexpr char kProvenanceOnlyVariable[] = "BITPARITY_PROVENANCE_ONLY";
constexpr char kProvenanceTag[] = "@provenance ";

bool IsRunnableFile(const fs::path& path) {
  std::error_code ec;
  return fs::is_regular_file(path, ec) && ::access(path.c_str(), X_OK) == 0;
}

// `program` as execvp would find it: a path (relative to `folder`) when it has a '/', else the
// first runnable file of that name on PATH; "" when there is none.
std::string FindProgram(const std::string& program, const fs::path& folder) {
  if (program.find('/') != std::string::npos) {
    const fs::path path = fs::path(program).is_absolute() ? fs::path(program) : folder / program;
    return IsRunnableFile(path) ? fs::absolute(path).lexically_normal().string() : "";
  }
  const char* path_variable = std::getenv("PATH");
  std::istringstream directories(path_variable ? path_variable : "");
  std::string directory;
  while (std::getline(directories, directory, ':')) {
    const fs::path candidate = fs::path(directory.empty() ? "." : directory) / program;
    if (IsRunnableFile(candidate)) return fs::absolute(candidate).lexically_normal().string();
  }
  return "";
}

// The counting CPU allocator's library beside this process's executable, or "".
std::string CpuMemoryLibraryBesideExecutable() {
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return "";
  const fs::path library = self.parent_path() / "libbitparity_cpu_memory.so";
  return fs::is_regular_file(library, ec) ? library.string() : "";
}

}  // namespace

std::string ExternalPython() {
  if (const char* chosen = std::getenv("BITPARITY_PYTHON"); chosen && *chosen) return chosen;
  return BITPARITY_BUILD_PYTHON;
}

ExternalCommand ResolveExternalCommand(const Recipe& recipe, const ArmConfig& arm) {
  const std::string where = recipe.path + ": [arms." + arm.name + "] command";
  if (arm.command.empty()) throw InputError(where + " is empty");
  std::vector<std::string> argv = arm.command;
  for (std::string& argument : argv) {
    if (argument != kPythonInterpreterArgument) continue;
    argument = ExternalPython();
    if (argument.empty()) {
      throw InputError(where + ": \"{python}\" names no interpreter in this build; set " +
                       "BITPARITY_PYTHON to one with PyTorch and the bitparity recorder");
    }
  }
  std::error_code ec;
  const fs::path folder = fs::absolute(fs::path(recipe.path).parent_path(), ec).lexically_normal();
  ExternalCommand command;
  command.executable = FindProgram(argv[0], folder);
  if (command.executable.empty()) {
    throw InputError(
        where + ": '" + argv[0] + "' " +
        (argv[0].find('/') != std::string::npos
             ? "is not a runnable file (relative paths are from " + folder.string() + ")"
             : "is not found on PATH"));
  }
  command.arguments.assign(argv.begin() + 1, argv.end());
  command.working_directory = folder.string();
  command.cpu_memory_library = CpuMemoryLibraryBesideExecutable();
  return command;
}

std::vector<std::pair<std::string, std::string>> ExternalLibrarySettings(const Recipe& recipe) {
  std::vector<std::pair<std::string, std::string>> out;
  const std::vector<std::string> pinned_here = VariablesPinnedHere();
  for (const EnvironmentSetting& setting :
       EnvironmentSettings(ToString(recipe.parallel.device), recipe.parallel.cpu_isa)) {
    const char* current = std::getenv(setting.name);
    const bool users =
        current && *current &&
        std::find(pinned_here.begin(), pinned_here.end(), setting.name) == pinned_here.end();
    if (setting.pinned || !users) out.emplace_back(setting.name, setting.value);
  }
  return out;
}

namespace {

// The `@provenance key=value` lines of `log`.
std::map<std::string, std::string> ProvenanceLines(const std::string& log) {
  std::map<std::string, std::string> facts;
  std::ifstream in(log);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(kProvenanceTag, 0) != 0) continue;
    const std::string fact = line.substr(std::strlen(kProvenanceTag));
    const size_t equals = fact.find('=');
    if (equals != std::string::npos) facts[fact.substr(0, equals)] = fact.substr(equals + 1);
  }
  return facts;
}

}  // namespace

ExternalProvenance AskExternalProvenance(const Recipe& recipe, const ArmConfig& arm,
                                         const std::string& log_path) {
  const ExternalCommand command = ResolveExternalCommand(recipe, arm);
  ProcessOptions options;
  options.executable = command.executable;
  options.arguments = command.arguments;
  options.working_directory = command.working_directory;
  options.set_environment = {{"RANK", "0"},
                             {"LOCAL_RANK", "0"},
                             {"WORLD_SIZE", std::to_string(recipe.world_size())},
                             {"BITPARITY_RECIPE", fs::absolute(recipe.path).string()},
                             {"BITPARITY_ARM", arm.name},
                             {kProvenanceOnlyVariable, "1"}};
  for (const auto& [key, value] : ExternalLibrarySettings(recipe)) {
    options.set_environment[key] = value;
  }
  options.output_path = log_path;
  options.process_group = 0;
  ExternalProvenance out;
  ChildProcess child = ChildProcess::Start(options);
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration<double>(recipe.parallel.timeout_seconds);
  while (!child.Poll()) {
    if (std::chrono::steady_clock::now() > deadline) {
      SignalProcessGroup(child.pid(), SIGKILL);
      child.Wait();
      out.failure = "it was still running after the recipe's timeout";
      return out;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  out.facts = ProvenanceLines(log_path);
  if (child.exit_code() != 0) {
    out.failure = "it exited with code " + std::to_string(child.exit_code());
  } else if (out.facts.empty()) {
    out.failure = "it printed no provenance (a program without the bitparity recorder)";
  }
  if (!out.failure.empty()) out.facts.clear();
  return out;
}

}  // namespace bitparity

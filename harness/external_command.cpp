#include "harness/external_command.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <sstream>

#include "core/errors.h"

namespace bitparity {
namespace {

namespace fs = std::filesystem;

constexpr char kPythonPlaceholder[] = "{python}";

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
    if (argument != kPythonPlaceholder) continue;
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

}  // namespace bitparity

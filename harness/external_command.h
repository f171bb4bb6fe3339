#ifndef BITPARITY_HARNESS_EXTERNAL_COMMAND_H_
#define BITPARITY_HARNESS_EXTERNAL_COMMAND_H_

// An external arm's program (a recipe's [arms.NAME] command, docs/external-arms.md) as the
// launcher starts it: the program found, its arguments, and the recipe's folder as the working
// directory, so that relative paths in the command are the recipe's. The argument "{python}"
// stands for the Python interpreter of $BITPARITY_PYTHON, else of the environment this bitparity
// was built with (ci/setup's, where the recorder is installed). Torch-free.

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "config/recipe.h"

namespace bitparity {

struct ExternalCommand {
  std::string executable;  // absolute
  std::vector<std::string> arguments;
  std::string working_directory;  // absolute: the recipe's folder
  // libbitparity_cpu_memory.so next to this bitparity (core/cpu_memory_library.cpp), handed to
  // the ranks in BITPARITY_CPU_MEMORY_LIBRARY; "" when the build has none.
  std::string cpu_memory_library;
};

// The command of `arm` (an external one), resolved. InputError naming the recipe, the arm and
// the program when the program does not exist or cannot be run, so that a run fails before any
// rank starts.
ExternalCommand ResolveExternalCommand(const Recipe& recipe, const ArmConfig& arm);

// The recipe's pinned library settings as an external rank gets them (a built-in rank pins them
// itself): every pinned one, and each unpinned one the user has not set.
std::vector<std::pair<std::string, std::string>> ExternalLibrarySettings(const Recipe& recipe);

// What the ranks of an external arm record as their provenance, asked before any rank trains:
// the command runs once as rank 0 with BITPARITY_PROVENANCE_ONLY=1, and the recorder prints
// `@provenance key=value` lines and exits 0 (python/bitparity). The golden of an external
// baseline is keyed by the fingerprint of these facts, as a built-in one is by this process's.
// `failure` says why there are none (a program without the recorder, an exit code, the
// recipe's timeout); its output goes to `log_path`.
struct ExternalProvenance {
  std::map<std::string, std::string> facts;
  std::string failure;
};
ExternalProvenance AskExternalProvenance(const Recipe& recipe, const ArmConfig& arm,
                                         const std::string& log_path);

// What "{python}" names, or "" when neither $BITPARITY_PYTHON nor the build's environment is
// known.
std::string ExternalPython();

}  // namespace bitparity

#endif  // BITPARITY_HARNESS_EXTERNAL_COMMAND_H_

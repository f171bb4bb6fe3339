#ifndef BITPARITY_HARNESS_EXTERNAL_COMMAND_H_
#define BITPARITY_HARNESS_EXTERNAL_COMMAND_H_

// An external arm's program (a recipe's [arms.NAME] command, docs/external-arms.md) as the
// launcher starts it: the program found, its arguments, and the recipe's folder as the working
// directory, so that relative paths in the command are the recipe's. The argument "{python}"
// stands for the Python interpreter of $BITPARITY_PYTHON, else of the environment this bitparity
// was built with (ci/setup's, where the recorder is installed). Torch-free.

#include <string>
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

// What "{python}" names, or "" when neither $BITPARITY_PYTHON nor the build's environment is
// known.
std::string ExternalPython();

}  // namespace bitparity

#endif  // BITPARITY_HARNESS_EXTERNAL_COMMAND_H_

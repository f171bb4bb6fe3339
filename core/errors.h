#ifndef BITPARITY_CORE_ERRORS_H_
#define BITPARITY_CORE_ERRORS_H_

#include <stdexcept>
#include <string>

namespace bitparity {

// Process exit codes shared by every bitparity command; CI gates on them.
enum ExitCode : int {
  kExitPass = 0,            // every check passed
  kExitCheckFailed = 1,     // a comparison found a difference
  kExitBadInput = 2,        // a malformed recipe, CLI, trace or golden; nothing was written
  kExitInfrastructure = 3,  // a rank crashed, failed or timed out
};

// Bad input: a recipe, command line, trace or golden that cannot be used. The message names the
// file and the field and says what was expected.
class InputError : public std::runtime_error {
 public:
  explicit InputError(const std::string& message) : std::runtime_error(message) {}
};

// A fault of the machinery rather than of the input or the math: a rank that crashed or hung,
// a collective that timed out, a file system error while writing results.
class InfrastructureError : public std::runtime_error {
 public:
  explicit InfrastructureError(const std::string& message) : std::runtime_error(message) {}
};

}  // namespace bitparity

#endif  // BITPARITY_CORE_ERRORS_H_

#ifndef BITPARITY_CORE_ERRORS_H_
#define BITPARITY_CORE_ERRORS_H_

#include <functional>
#include <ostream>
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

// Runs `body` and maps what escapes it onto the exit codes, printing the message to `err`:
// InputError is 2, InfrastructureError 3, and any other exception `internal_error_exit`,
// "internal error": a fault of bitparity or of a library (a broken invariant), never a check
// that failed. The CLI passes 3; a rank process passes kRankExitFailed (comm/rank_protocol.h), so
// that the launcher can tell the rank that failed on its own from the peers that lost it (3).
int RunMappingErrors(const std::function<int()>& body, std::ostream& err,
                     int internal_error_exit = kExitInfrastructure);

}  // namespace bitparity

#endif  // BITPARITY_CORE_ERRORS_H_

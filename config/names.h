#ifndef BITPARITY_CONFIG_NAMES_H_
#define BITPARITY_CONFIG_NAMES_H_

// Names that become path components (recipe, matrix, arm and cell names: out/<recipe>/<arm>/,
// golden/<recipe>/, <out>/<cell>/) are identifiers: 1 to 64 characters of letters, digits, '_',
// '-' and '.', starting with a letter, a digit or '_'. So a name can never leave the folder it
// is placed in ("..", "/", an absolute path) or be empty. Torch-free.

#include <string>

namespace bitparity {

inline constexpr char kIdentifierRule[] =
    "1-64 characters of letters, digits, '_', '-' and '.', starting with a letter, a digit or "
    "'_'";

// Whether `name` is an identifier.
bool IsIdentifier(const std::string& name);

// "" when `name` is an identifier; else "<what> '<name>' must be <rule>" (the name quoted with
// its unprintable bytes escaped).
std::string IdentifierProblem(const std::string& what, const std::string& name);

}  // namespace bitparity

#endif  // BITPARITY_CONFIG_NAMES_H_

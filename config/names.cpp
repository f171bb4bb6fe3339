#include "config/names.h"

#include <cctype>
#include <cstdio>

namespace bitparity {

bool IsIdentifier(const std::string& name) {
  if (name.empty() || name.size() > 64) return false;
  const unsigned char first = static_cast<unsigned char>(name[0]);
  if (!std::isalnum(first) && first != '_') return false;
  for (char c : name) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (!std::isalnum(u) && c != '_' && c != '-' && c != '.') return false;
  }
  return true;
}

std::string IdentifierProblem(const std::string& what, const std::string& name) {
  if (IsIdentifier(name)) return "";
  std::string shown;
  for (char c : name.substr(0, 80)) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (std::isprint(u) && c != '\'' && c != '\\') {
      shown += c;
    } else {
      char escaped[8];
      std::snprintf(escaped, sizeof(escaped), "\\x%02x", u);
      shown += escaped;
    }
  }
  if (name.size() > 80) shown += "...";
  return what + " '" + shown + "' must be " + kIdentifierRule;
}

}  // namespace bitparity

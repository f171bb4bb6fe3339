#include "trace/trace.h"

#include <string>

namespace bitparity {

const std::string& Trace::attribute(const std::string& key) const {
  static const std::string kEmpty;
  auto it = attributes.find(key);
  return it == attributes.end() ? kEmpty : it->second;
}

}  // namespace bitparity

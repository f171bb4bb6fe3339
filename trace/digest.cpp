#include "trace/digest.h"

#include <xxhash.h>

#include <cinttypes>
#include <cstdio>

namespace bitparity {

uint64_t Digest(const void* data, size_t bytes) { return XXH3_64bits(data, bytes); }

std::string HexDigest(uint64_t digest) {
  char buffer[32];
  std::snprintf(buffer, sizeof(buffer), "0x%016" PRIx64, digest);
  return buffer;
}

}  // namespace bitparity

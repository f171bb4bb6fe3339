#include "trace/digest.h"

#include <xxhash.h>

namespace bitparity {

uint64_t Digest(const void* data, size_t bytes) { return XXH3_64bits(data, bytes); }

}  // namespace bitparity

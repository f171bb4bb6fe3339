#ifndef BITPARITY_TRACE_DIGEST_H_
#define BITPARITY_TRACE_DIGEST_H_

// XXH3-64 digests of raw bytes: the fingerprint of a gradient or parameter tensor in a trace.

#include <cstddef>
#include <cstdint>
#include <string>

namespace bitparity {

uint64_t Digest(const void* data, size_t bytes);

// A digest as reports, traces' attributes and logs write it: "0x" and 16 hex digits.
std::string HexDigest(uint64_t digest);

}  // namespace bitparity

#endif  // BITPARITY_TRACE_DIGEST_H_

#ifndef BITPARITY_HARNESS_FINGERPRINT_H_
#define BITPARITY_HARNESS_FINGERPRINT_H_

// The environment fingerprint: what decides the bits of a recipe's run on a machine — the
// LibTorch, BLAS and oneDNN versions, the CPU instruction-set level the ranks pin ([parallel]
// cpu_isa), the compiler, threads per rank, world size, and on GPUs the GPU model and CUDA
// libraries. Not the host's CPU: two hosts with different CPUs that both run the pinned level
// share a fingerprint, and with it their goldens; only at cpu_isa "native" do the CPU's vendor
// and features count. Goldens are gated within one fingerprint.

#include <cstdint>
#include <map>
#include <string>

#include "config/recipe.h"
#include "trace/trace.h"

namespace bitparity {

struct Fingerprint {
  std::map<std::string, std::string> fields;
  std::string key;  // "cpu-" + 12 hex digits of a hash of the fields; names golden files

  // The fields that differ from `other`, comma-separated ("" when none).
  std::string DifferingFields(const Fingerprint& other) const;
  std::string Describe() const;  // "key (field=value, ...)"
};

Fingerprint MakeFingerprint(const std::map<std::string, std::string>& provenance,
                            int64_t threads_per_rank, int64_t world_size);
// The fingerprint of this machine for `recipe` (computed without training).
Fingerprint LocalFingerprint(const Recipe& recipe);
// The fingerprint a trace was recorded under (rank 0's provenance).
Fingerprint TraceFingerprint(const Trace& trace);

}  // namespace bitparity

#endif  // BITPARITY_HARNESS_FINGERPRINT_H_

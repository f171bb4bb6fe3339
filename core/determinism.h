#ifndef BITPARITY_CORE_DETERMINISM_H_
#define BITPARITY_CORE_DETERMINISM_H_

// Process-wide switches that make LibTorch's kernels reproducible bit for bit, and the process
// environment that must be in place before the first MKL, CUDA or NCCL call reads it.

#include <cstdint>
#include <string>
#include <vector>

namespace bitparity {

// An environment variable bitparity sets in every rank process because it changes bits (or
// because a diagnostic behind it breaks something). `pinned` variables must not be set to
// another value by the user (bad input: the results would no longer be what the fingerprint
// says); the others keep a value the user chose.
struct EnvironmentSetting {
  const char* name;
  const char* value;
  bool pinned;
  const char* why;
};

// The settings for a rank on `device` ("cpu" or "cuda"), in the order they are applied.
const std::vector<EnvironmentSetting>& EnvironmentSettings(const std::string& device);

// Applies EnvironmentSettings(device) to this process: sets every variable that is unset.
// Throws InputError naming the variable, its value and the pinned value when a pinned variable
// is set to something else. Call before the first LibTorch computation (MKL and NCCL read their
// variables once, at their first use).
void PinEnvironment(const std::string& device);

// Pins the intra-op thread count (bit patterns of large reductions depend on it), uses one
// inter-op thread, and turns on deterministic algorithms (e.g. index_put_ with accumulate).
// Applies PinEnvironment("cpu") first if no PinEnvironment call came before.
void ConfigureDeterminism(int64_t intra_op_threads);

// Turns deterministic algorithms off again (the injected fault nondeterministic_kernel runs as a
// rank that never forced them would).
void AllowNondeterministicAlgorithms();
// Whether deterministic algorithms are forced in this process.
bool DeterministicAlgorithmsForced();

}  // namespace bitparity

#endif  // BITPARITY_CORE_DETERMINISM_H_

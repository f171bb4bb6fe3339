#ifndef BITPARITY_NUMERICS_DETERMINISM_H_
#define BITPARITY_NUMERICS_DETERMINISM_H_

// Process-wide switches that make LibTorch's kernels reproducible bit for bit, and the process
// environment that must be in place before the first ATen, oneDNN, MKL, CUDA or NCCL call reads
// it: among it the CPU instruction-set level of numerics/cpu_isa.h.

#include <cstdint>
#include <string>
#include <vector>

#include "numerics/cpu_isa.h"

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

// The settings for a rank on `device` ("cpu" or "cuda") at CPU level `isa`, in the order they
// are applied.
std::vector<EnvironmentSetting> EnvironmentSettings(const std::string& device,
                                                    CpuIsa isa = CpuIsa::kAvx2);

// InputError naming the variable, its value and the pinned value when this process's
// environment sets a pinned variable of EnvironmentSettings(device, isa) to something else
// ("environment: MKL_CBWR=AVX2 conflicts with MKL_CBWR=COMPATIBLE that bitparity pins (...)");
// changes nothing; a variable this process pinned for itself (VariablesPinnedHere) does not count,
// as ranks do not inherit it. Called before any rank starts.
void CheckEnvironmentConflicts(const std::string& device, CpuIsa isa);

// Applies EnvironmentSettings(device, isa) to this process: sets every variable that is unset,
// after CheckEnvironmentConflicts and RequireHostRuns(isa) (InputError). Call before the first
// LibTorch computation (ATen, oneDNN, MKL and NCCL read their variables once, at their first
// use).
void PinEnvironment(const std::string& device, CpuIsa isa = CpuIsa::kAvx2);

// The level this process pinned (kAvx2 before any PinEnvironment call).
CpuIsa PinnedCpuIsa();

// The variables PinEnvironment set in this process (those the user had not set). A process that
// starts ranks (a test, a benchmark) removes them from the ranks' environment, so that each rank
// pins its own recipe's level, not the one its parent pinned for itself.
std::vector<std::string> VariablesPinnedHere();

// Pins the intra-op thread count (bit patterns of large reductions depend on it), uses one
// inter-op thread, and turns on deterministic algorithms (e.g. index_put_ with accumulate).
// Applies PinEnvironment("cpu") first if no PinEnvironment call came before. Then checks that
// ATen runs the pinned level's kernels: InfrastructureError when it does not (a computation
// before the pin made ATen choose its kernels already).
void ConfigureDeterminism(int64_t intra_op_threads);

// The CPU capability ATen's kernels dispatch to in this process ("AVX2", "AVX512", "DEFAULT").
std::string AtenCpuCapability();

// Turns deterministic algorithms off again (the injected fault nondeterministic_kernel runs as a
// rank that never forced them would).
void AllowNondeterministicAlgorithms();
// Whether deterministic algorithms are forced in this process.
bool DeterministicAlgorithmsForced();

}  // namespace bitparity

#endif  // BITPARITY_NUMERICS_DETERMINISM_H_

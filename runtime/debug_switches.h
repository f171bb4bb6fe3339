#ifndef BITPARITY_RUNTIME_DEBUG_SWITCHES_H_
#define BITPARITY_RUNTIME_DEBUG_SWITCHES_H_

// Developer switches read from the environment of a rank process (docs/developer.md):
//   BITPARITY_FAULT="crash|segv|hang|error|startup,rank=R[,iteration=I]"
//       makes rank R abort, segfault, hang, exit 1, or exit 1 before joining the group, at the
//       start of iteration I (default 1). Used by the launcher's fault tests.
//   BITPARITY_PERTURB="rank=R,iteration=I,param=NAME,element=K[,ulps=N]"
//       adds N (default 1) units in the last place to element K of NAME's main grad on rank R
//       at iteration I, after the data-parallel reduction.

#include <cstdint>
#include <string>

#include "runtime/trainer.h"

namespace bitparity {

enum class FaultKind { kNone, kCrash, kSegv, kHang, kError, kStartup };

struct FaultPlan {
  static constexpr int64_t kEveryRank = -1;  // `rank=all`
  FaultKind kind = FaultKind::kNone;
  int64_t rank = 0;
  int64_t iteration = 1;
};

// Parses `text` (the variable's value; empty means off). InputError on malformed input.
FaultPlan ParseFaultPlan(const std::string& text);
GradPerturbation ParseGradPerturbation(const std::string& text);

// Carries out `plan` if it targets (rank, iteration); returns otherwise.
void MaybeInjectFault(const FaultPlan& plan, int64_t rank, int64_t iteration);

}  // namespace bitparity

#endif  // BITPARITY_RUNTIME_DEBUG_SWITCHES_H_

#ifndef BITPARITY_NUMERICS_PROVENANCE_H_
#define BITPARITY_NUMERICS_PROVENANCE_H_

// Where a trace came from: the source revision and everything about the environment that can
// change floating-point bits (LibTorch, BLAS and oneDNN versions, the pinned CPU level and what
// it pinned, ATen's CPU capability in effect, intra-op threads, compiler, CPU vendor and
// features; GPU and CUDA library versions on GPUs). Recorded as trace attributes
// "provenance.<key>".

#include <map>
#include <string>

namespace bitparity {

extern const char kGitRevision[];

// Provenance of this process, keys without the "provenance." prefix; with `cuda_device` >= 0
// also that GPU's and the CUDA libraries' (core/cuda_support.h), and device "cuda".
std::map<std::string, std::string> CollectProvenance(int cuda_device = -1);

}  // namespace bitparity

#endif  // BITPARITY_NUMERICS_PROVENANCE_H_

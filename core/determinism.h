#ifndef BITPARITY_CORE_DETERMINISM_H_
#define BITPARITY_CORE_DETERMINISM_H_

// Process-wide switches that make LibTorch CPU kernels reproducible bit for bit.

#include <cstdint>

namespace bitparity {

// Pins the intra-op thread count (bit patterns of large reductions depend on it), uses one
// inter-op thread, and turns on deterministic algorithms (e.g. index_put_ with accumulate).
void ConfigureDeterminism(int64_t intra_op_threads);

}  // namespace bitparity

#endif  // BITPARITY_CORE_DETERMINISM_H_

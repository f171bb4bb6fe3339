#ifndef BITPARITY_CORE_MEMORY_H_
#define BITPARITY_CORE_MEMORY_H_

// Accounting of CPU tensor memory: a wrapper around LibTorch's CPU allocator that counts live
// and peak bytes of every tensor allocation made after it is installed. Memory that kernels
// allocate outside the c10 allocator (library scratch buffers) is not seen.

#include <cstdint>

namespace bitparity {

class MemoryTracker {
 public:
  // Installs the counting allocator for this process (idempotent). Call before creating tensors.
  static void Install();
  static bool installed();

  static int64_t current_bytes();
  static int64_t peak_bytes();
  // Starts a new peak window at the current level.
  static void ResetPeak();
};

}  // namespace bitparity

#endif  // BITPARITY_CORE_MEMORY_H_

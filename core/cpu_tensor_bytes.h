#ifndef BITPARITY_CORE_CPU_TENSOR_BYTES_H_
#define BITPARITY_CORE_CPU_TENSOR_BYTES_H_

// The counting CPU allocator: a wrapper around LibTorch's CPU allocator that counts the live bytes
// of every tensor allocated after it is installed, and the peaks of three independent windows
// (the iteration's, the memory timeline's, the probes'). One per process. MemoryTracker
// (core/memory.h) reads it on the CPU; the recorder of an external arm reads it through the C
// interface of core/cpu_memory_library.cpp, loaded into a PyTorch process.

#include <cstdint>

namespace bitparity {
namespace cpu_tensor_bytes {

// Installs the allocator for this process (idempotent); tensors allocated before are not counted,
// and their frees neither.
void Install();
bool installed();

int64_t current();

// The iteration's window: the highest live level since the last ResetPeak.
int64_t peak();
void ResetPeak();

// The timeline's window: returns its peak and starts the next window at the current level.
int64_t TakeWindowPeak();
void ResetWindow();

// The probes' window.
int64_t probe_peak();
void ResetProbePeak();

}  // namespace cpu_tensor_bytes
}  // namespace bitparity

#endif  // BITPARITY_CORE_CPU_TENSOR_BYTES_H_

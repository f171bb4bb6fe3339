#ifndef BITPARITY_CORE_MEMORY_H_
#define BITPARITY_CORE_MEMORY_H_

// Accounting of tensor memory. On the CPU: a wrapper around LibTorch's CPU allocator that counts
// live and peak bytes of every tensor allocation made after it is installed. oneDNN's
// scratchpads, where a CPU's kernels take one, come from the c10 allocator in this LibTorch and
// are counted (a test pins that down); memory a library takes from malloc directly (the BLAS's own
// buffers, say) is not seen. On a GPU (TrackCudaDevice): the CUDA caching allocator's allocated
// bytes of that device, which include every tensor and the libraries' workspaces taken from it.

#include <cstdint>
#include <string>
#include <vector>

namespace bitparity {

class MemoryTracker {
 public:
  // Installs the counting allocator for this process (idempotent). Call before creating tensors.
  static void Install();
  static bool installed();
  // From now on, counts the allocated bytes of GPU `device` instead of CPU tensors.
  static void TrackCudaDevice(int device);

  static int64_t current_bytes();
  static int64_t peak_bytes();
  // Starts a new peak window at the current level.
  static void ResetPeak();
  // A second, independent peak window for measurements inside an iteration (probes).
  static void ResetProbePeak();
  static int64_t probe_peak_bytes();
};

// One point of a memory timeline: live bytes at a mark and the peak since the previous mark.
struct MemorySample {
  int64_t iteration = 0;
  int64_t time_ns = 0;
  int64_t current_bytes = 0;
  int64_t peak_bytes = 0;
  std::string label;  // the phase that just ended, e.g. "replay segment[1] mb0"
};

// A process-wide recorder of MemorySamples at phase marks (off unless enabled).
class MemoryTimeline {
 public:
  static void Enable(bool on);
  static bool enabled();
  static void SetIteration(int64_t iteration);
  // Records the live bytes now and the peak since the previous mark; no-op when disabled.
  static void Mark(const std::string& label);
  // Returns the samples recorded so far and forgets them.
  static std::vector<MemorySample> Take();
};

}  // namespace bitparity

#endif  // BITPARITY_CORE_MEMORY_H_

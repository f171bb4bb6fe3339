#include "core/memory.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>

#include "core/cpu_tensor_bytes.h"
#include "core/cuda_support.h"

namespace bitparity {
namespace {

// The GPU whose caching allocator is counted, or -1 (CPU tensors: core/cpu_tensor_bytes.h). On a
// GPU the allocator keeps one peak that can be reset; the iteration's and the timeline's windows
// are kept from it: g_cuda_iteration_peak is the peak seen at timeline marks since the iteration's
// reset.
std::atomic<int> g_cuda_device{-1};
std::atomic<int64_t> g_cuda_iteration_peak{0};

}  // namespace

void MemoryTracker::Install() { cpu_tensor_bytes::Install(); }

bool MemoryTracker::installed() { return cpu_tensor_bytes::installed(); }

void MemoryTracker::TrackCudaDevice(int device) {
  g_cuda_device.store(device);
  cuda::ResetPeakAllocated(device);
  g_cuda_iteration_peak.store(cuda::AllocatedBytes(device));
}

int64_t MemoryTracker::current_bytes() {
  const int device = g_cuda_device.load();
  return device >= 0 ? cuda::AllocatedBytes(device) : cpu_tensor_bytes::current();
}

int64_t MemoryTracker::peak_bytes() {
  const int device = g_cuda_device.load();
  if (device < 0) return cpu_tensor_bytes::peak();
  return std::max(g_cuda_iteration_peak.load(), cuda::PeakAllocatedBytes(device));
}

void MemoryTracker::ResetPeak() {
  const int device = g_cuda_device.load();
  if (device < 0) {
    cpu_tensor_bytes::ResetPeak();
    return;
  }
  cuda::ResetPeakAllocated(device);
  g_cuda_iteration_peak.store(cuda::AllocatedBytes(device));
}

void MemoryTracker::ResetProbePeak() {
  const int device = g_cuda_device.load();
  if (device >= 0) {
    ResetPeak();  // probes run before training, outside every iteration
    return;
  }
  cpu_tensor_bytes::ResetProbePeak();
}

int64_t MemoryTracker::probe_peak_bytes() {
  return g_cuda_device.load() >= 0 ? peak_bytes() : cpu_tensor_bytes::probe_peak();
}

namespace {

std::atomic<bool> g_timeline_on{false};
std::mutex g_timeline_mutex;
std::vector<MemorySample> g_samples;
int64_t g_iteration = 0;

}  // namespace

void MemoryTimeline::Enable(bool on) {
  g_timeline_on.store(on);
  cpu_tensor_bytes::ResetWindow();
}

bool MemoryTimeline::enabled() { return g_timeline_on.load(); }

void MemoryTimeline::SetIteration(int64_t iteration) {
  std::lock_guard<std::mutex> lock(g_timeline_mutex);
  g_iteration = iteration;
}

void MemoryTimeline::Mark(const std::string& label) {
  if (!g_timeline_on.load()) return;
  MemorySample sample;
  sample.time_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                       std::chrono::steady_clock::now().time_since_epoch())
                       .count();
  const int device = g_cuda_device.load();
  if (device >= 0) {
    // The allocator's peak since the previous mark, kept for the iteration, then reset.
    sample.current_bytes = cuda::AllocatedBytes(device);
    sample.peak_bytes = cuda::PeakAllocatedBytes(device);
    int64_t kept = g_cuda_iteration_peak.load();
    while (sample.peak_bytes > kept &&
           !g_cuda_iteration_peak.compare_exchange_weak(kept, sample.peak_bytes)) {
    }
    cuda::ResetPeakAllocated(device);
  } else {
    sample.current_bytes = cpu_tensor_bytes::current();
    sample.peak_bytes = cpu_tensor_bytes::TakeWindowPeak();
  }
  sample.label = label;
  std::lock_guard<std::mutex> lock(g_timeline_mutex);
  sample.iteration = g_iteration;
  g_samples.push_back(std::move(sample));
}

std::vector<MemorySample> MemoryTimeline::Take() {
  std::lock_guard<std::mutex> lock(g_timeline_mutex);
  std::vector<MemorySample> out;
  out.swap(g_samples);
  return out;
}

}  // namespace bitparity

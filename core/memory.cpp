#include "core/memory.h"

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/alloc_cpu.h>
#include <malloc.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <mutex>

#include "core/cuda_support.h"

namespace bitparity {
namespace {

// The GPU whose caching allocator is counted, or -1 (CPU tensors). On a GPU the allocator keeps
// one peak that can be reset; the iteration's and the timeline's windows are kept from it:
// g_cuda_window_peak is the peak seen at timeline marks since the iteration's reset.
std::atomic<int> g_cuda_device{-1};
std::atomic<int64_t> g_cuda_iteration_peak{0};

std::atomic<int64_t> g_current{0};
std::atomic<int64_t> g_peak{0};
std::atomic<int64_t> g_window_peak{0};
std::atomic<int64_t> g_probe_peak{0};
std::atomic<bool> g_installed{false};

// Keeps data == context (some kernels call raw_allocate, which requires it), so the allocation
// size lives in a 64-byte header in front of the data, which keeps 64-byte alignment.
class CountingCpuAllocator final : public c10::Allocator {
 public:
  static constexpr size_t kHeader = 64;

  static void Delete(void* data) {
    if (!data) return;
    char* base = static_cast<char*>(data) - kHeader;
    g_current.fetch_sub(static_cast<int64_t>(*reinterpret_cast<size_t*>(base)));
    c10::free_cpu(base);
  }

  c10::DataPtr allocate(size_t bytes) override {
    char* base = static_cast<char*>(c10::alloc_cpu(bytes + kHeader));
    *reinterpret_cast<size_t*>(base) = bytes;
    void* data = base + kHeader;
    int64_t now = g_current.fetch_add(static_cast<int64_t>(bytes)) + static_cast<int64_t>(bytes);
    int64_t peak = g_peak.load();
    while (now > peak && !g_peak.compare_exchange_weak(peak, now)) {
    }
    int64_t window = g_window_peak.load();
    while (now > window && !g_window_peak.compare_exchange_weak(window, now)) {
    }
    int64_t probe = g_probe_peak.load();
    while (now > probe && !g_probe_peak.compare_exchange_weak(probe, now)) {
    }
    return {data, data, &Delete, c10::Device(c10::DeviceType::CPU)};
  }

  c10::DeleterFnPtr raw_deleter() const override { return &Delete; }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
};

CountingCpuAllocator g_allocator;

}  // namespace

void MemoryTracker::Install() {
  bool expected = false;
  if (g_installed.compare_exchange_strong(expected, true)) {
    // Large tensors are allocated and freed at every layer; served by mmap/munmap each time,
    // every allocation paid page faults (a fifth of a step on the memory recipe). Keep them in
    // the heap instead. Tensor accounting is unaffected (it counts requested bytes).
    mallopt(M_MMAP_THRESHOLD, 256 << 20);
    mallopt(M_TRIM_THRESHOLD, 512 << 20);
    c10::SetCPUAllocator(&g_allocator, /*priority=*/100);
  }
}

bool MemoryTracker::installed() { return g_installed.load(); }

void MemoryTracker::TrackCudaDevice(int device) {
  g_cuda_device.store(device);
  cuda::ResetPeakAllocated(device);
  g_cuda_iteration_peak.store(cuda::AllocatedBytes(device));
}

int64_t MemoryTracker::current_bytes() {
  const int device = g_cuda_device.load();
  return device >= 0 ? cuda::AllocatedBytes(device) : g_current.load();
}

int64_t MemoryTracker::peak_bytes() {
  const int device = g_cuda_device.load();
  if (device < 0) return g_peak.load();
  return std::max(g_cuda_iteration_peak.load(), cuda::PeakAllocatedBytes(device));
}

void MemoryTracker::ResetPeak() {
  const int device = g_cuda_device.load();
  if (device < 0) {
    g_peak.store(g_current.load());
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
  g_probe_peak.store(g_current.load());
}

int64_t MemoryTracker::probe_peak_bytes() {
  return g_cuda_device.load() >= 0 ? peak_bytes() : g_probe_peak.load();
}

namespace {

std::atomic<bool> g_timeline_on{false};
std::mutex g_timeline_mutex;
std::vector<MemorySample> g_samples;
int64_t g_iteration = 0;

}  // namespace

void MemoryTimeline::Enable(bool on) {
  g_timeline_on.store(on);
  g_window_peak.store(g_current.load());
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
    sample.current_bytes = g_current.load();
    sample.peak_bytes = g_window_peak.exchange(sample.current_bytes);
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

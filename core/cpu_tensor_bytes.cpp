#include "core/cpu_tensor_bytes.h"

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/alloc_cpu.h>
#include <malloc.h>

#include <atomic>
#include <cstddef>

namespace bitparity {
namespace cpu_tensor_bytes {
namespace {

std::atomic<int64_t> g_current{0};
std::atomic<int64_t> g_peak{0};
std::atomic<int64_t> g_window_peak{0};
std::atomic<int64_t> g_probe_peak{0};
std::atomic<bool> g_installed{false};

void RaiseTo(std::atomic<int64_t>& peak, int64_t now) {
  int64_t seen = peak.load();
  while (now > seen && !peak.compare_exchange_weak(seen, now)) {
  }
}

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
    const int64_t now =
        g_current.fetch_add(static_cast<int64_t>(bytes)) + static_cast<int64_t>(bytes);
    RaiseTo(g_peak, now);
    RaiseTo(g_window_peak, now);
    RaiseTo(g_probe_peak, now);
    return {data, data, &Delete, c10::Device(c10::DeviceType::CPU)};
  }

  c10::DeleterFnPtr raw_deleter() const override { return &Delete; }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
};

CountingCpuAllocator g_allocator;

}  // namespace

void Install() {
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

bool installed() { return g_installed.load(); }

int64_t current() { return g_current.load(); }

int64_t peak() { return g_peak.load(); }

void ResetPeak() { g_peak.store(g_current.load()); }

int64_t TakeWindowPeak() { return g_window_peak.exchange(g_current.load()); }

void ResetWindow() { g_window_peak.store(g_current.load()); }

int64_t probe_peak() { return g_probe_peak.load(); }

void ResetProbePeak() { g_probe_peak.store(g_current.load()); }

}  // namespace cpu_tensor_bytes
}  // namespace bitparity

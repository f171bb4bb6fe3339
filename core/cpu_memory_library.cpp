// libbitparity_cpu_memory.so: the counting CPU allocator (core/cpu_tensor_bytes.h) behind a C
// interface, for a process that is not bitparity's own: the Python recorder of an external arm
// loads it with ctypes after importing torch (the same libc10 then serves both), installs it
// before the model is built, and reads the same tensor accounting the built-in engines report.
// The launcher names the library to external ranks in BITPARITY_CPU_MEMORY_LIBRARY.

#include <cstdint>

#include "core/cpu_tensor_bytes.h"

extern "C" {

__attribute__((visibility("default"))) void bitparity_cpu_memory_install() {
  bitparity::cpu_tensor_bytes::Install();
}

__attribute__((visibility("default"))) int64_t bitparity_cpu_memory_current_bytes() {
  return bitparity::cpu_tensor_bytes::current();
}

__attribute__((visibility("default"))) int64_t bitparity_cpu_memory_peak_bytes() {
  return bitparity::cpu_tensor_bytes::peak();
}

__attribute__((visibility("default"))) void bitparity_cpu_memory_reset_peak() {
  bitparity::cpu_tensor_bytes::ResetPeak();
}

}  // extern "C"

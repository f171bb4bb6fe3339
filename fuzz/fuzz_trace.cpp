// libFuzzer target: the trace reader on arbitrary bytes (written to a file, as traces are read).
// Every input must either read as a trace or be refused with InputError; a crash, a sanitizer
// report or another exception is a finding. HDF5 1.10 itself crashes on some corrupt files (it
// trusts lengths stored in the global heap): ci/fuzz runs this target in fork mode, keeps going
// past crashes, and sorts each one by where it happened (inside libhdf5: the known library
// fault, which `bitparity` turns into bad input through ReadTraceIsolated; anywhere else: a bug).

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

#include "core/errors.h"
#include "trace/trace.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = "/tmp/bitparity-fuzz-trace-" + std::to_string(::getpid()) + ".h5";
  FILE* file = std::fopen(path.c_str(), "wb");
  if (file == nullptr) return 0;
  std::fwrite(data, 1, size, file);
  std::fclose(file);
  try {
    bitparity::ReadTrace(path, /*require_complete=*/false);
  } catch (const bitparity::InputError&) {
  }
  std::remove(path.c_str());
  return 0;
}

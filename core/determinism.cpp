#include "core/determinism.h"

#include <ATen/Context.h>
#include <ATen/Parallel.h>

#include <atomic>
#include <cstdlib>
#include <cstring>

#include "core/errors.h"

namespace bitparity {
namespace {

std::atomic<bool> g_environment_pinned{false};

const std::vector<EnvironmentSetting> kCpuSettings = {
    // MKL's strict conditional-numerical-reproducibility mode on the CPU's own code branch:
    // fp32 GEMM bits independent of thread count and operand alignment (measured on this LibTorch:
    // MKL_CBWR=AUTO changes GEMM bits between 1 and 2 threads, AUTO,STRICT does not).
    {"MKL_CBWR", "AUTO,STRICT", true,
     "MKL's strict reproducibility mode; fp32 GEMM bits depend on it"},
    // c10d's flight recorder captures a stack trace for every collective and updates a
    // process-wide map without its lock, which crashes when several ranks share one process
    // (the in-process test worlds). bitparity's own traces name failing collectives.
    {"TORCH_FR_BUFFER_SIZE", "0", false, "c10d's flight recorder, off"},
};

const std::vector<EnvironmentSetting> kCudaSettings = [] {
  std::vector<EnvironmentSetting> settings = kCpuSettings;
  const std::vector<EnvironmentSetting> cuda = {
      // cuBLAS picks reduction splits by workspace size; a fixed workspace keeps them fixed
      // (required by deterministic algorithms on CUDA >= 10.2).
      {"CUBLAS_WORKSPACE_CONFIG", ":4096:8", true, "cuBLAS workspace; GEMM bits depend on it"},
      // NCCL's reductions sum in an order set by algorithm, protocol and channels. bitparity
      // sums over ranks itself in rank order, but any NCCL reduction stays fixed with these.
      {"NCCL_ALGO", "Ring", true, "NCCL algorithm; reduction order depends on it"},
      {"NCCL_PROTO", "Simple", true, "NCCL protocol; reduction order depends on it"},
      {"NCCL_MIN_NCHANNELS", "16", true, "NCCL channel count; reduction order depends on it"},
      {"NCCL_MAX_NCHANNELS", "16", true, "NCCL channel count; reduction order depends on it"},
  };
  settings.insert(settings.end(), cuda.begin(), cuda.end());
  return settings;
}();

}  // namespace

const std::vector<EnvironmentSetting>& EnvironmentSettings(const std::string& device) {
  return device == "cuda" ? kCudaSettings : kCpuSettings;
}

void PinEnvironment(const std::string& device) {
  for (const EnvironmentSetting& s : EnvironmentSettings(device)) {
    const char* current = std::getenv(s.name);
    if (current == nullptr || *current == '\0') {
      ::setenv(s.name, s.value, /*overwrite=*/1);
    } else if (s.pinned && std::strcmp(current, s.value) != 0) {
      throw InputError(std::string("environment: ") + s.name + "=" + current + " conflicts with " +
                       s.name + "=" + s.value + " that bitparity pins (" + s.why + "); unset it");
    }
  }
  g_environment_pinned.store(true);
}

void ConfigureDeterminism(int64_t intra_op_threads) {
  if (!g_environment_pinned.load()) PinEnvironment("cpu");
  at::set_num_threads(static_cast<int>(intra_op_threads));
  static bool interop_set = [] {
    at::set_num_interop_threads(1);
    return true;
  }();
  (void)interop_set;
  at::globalContext().setDeterministicAlgorithms(true, /*warn_only=*/false);
}

void AllowNondeterministicAlgorithms() {
  at::globalContext().setDeterministicAlgorithms(false, /*warn_only=*/false);
}

bool DeterministicAlgorithmsForced() { return at::globalContext().deterministicAlgorithms(); }

}  // namespace bitparity

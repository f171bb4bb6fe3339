#include "numerics/determinism.h"

#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <ATen/Version.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "core/errors.h"

namespace bitparity {
namespace {

std::atomic<bool> g_environment_pinned{false};
std::atomic<CpuIsa> g_pinned_isa{CpuIsa::kAvx2};
std::mutex g_pinned_here_mutex;
std::vector<std::string> g_pinned_here;

// The level's variables (numerics/cpu_isa.h): the kernels of ATen, oneDNN and MKL, each pinned to
// the same instruction-set level; a library the level leaves unpinned (native) is not listed.
std::vector<EnvironmentSetting> CpuIsaSettings(CpuIsa isa) {
  const CpuIsaPin& pin = PinOf(isa);
  std::vector<EnvironmentSetting> settings;
  if (pin.aten_cpu_capability != nullptr) {
    settings.push_back({"ATEN_CPU_CAPABILITY", pin.aten_cpu_capability, true,
                        "ATen's CPU kernels at the recipe's [parallel] cpu_isa; their bits "
                        "depend on it"});
  }
  if (pin.onednn_max_cpu_isa != nullptr) {
    settings.push_back({"ONEDNN_MAX_CPU_ISA", pin.onednn_max_cpu_isa, true,
                        "oneDNN's kernels at the recipe's [parallel] cpu_isa; their bits depend "
                        "on it"});
  }
  settings.push_back({"MKL_CBWR", pin.mkl_cbwr, true,
                      "MKL's reproducibility branch at the recipe's [parallel] cpu_isa; fp32 GEMM "
                      "bits depend on it"});
  return settings;
}

const std::vector<EnvironmentSetting> kProcessSettings = {
    // c10d's flight recorder captures a stack trace for every collective and updates a
    // process-wide map without its lock, which crashes when several ranks share one process
    // (the in-process test worlds). bitparity's own traces name failing collectives.
    {"TORCH_FR_BUFFER_SIZE", "0", false, "c10d's flight recorder, off"},
};

const std::vector<EnvironmentSetting> kCudaSettings = [] {
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
  return cuda;
}();

}  // namespace

std::vector<EnvironmentSetting> EnvironmentSettings(const std::string& device, CpuIsa isa) {
  std::vector<EnvironmentSetting> settings = CpuIsaSettings(isa);
  settings.insert(settings.end(), kProcessSettings.begin(), kProcessSettings.end());
  if (device == "cuda") settings.insert(settings.end(), kCudaSettings.begin(), kCudaSettings.end());
  return settings;
}

namespace {

// InputError for the first pinned variable of the settings that this process's environment sets
// to another value; variables named in `ignored` do not count.
void RequireNoConflict(const std::string& device, CpuIsa isa,
                       const std::vector<std::string>& ignored) {
  for (const EnvironmentSetting& s : EnvironmentSettings(device, isa)) {
    const char* current = std::getenv(s.name);
    if (!s.pinned || current == nullptr || *current == '\0') continue;
    if (std::find(ignored.begin(), ignored.end(), s.name) != ignored.end()) continue;
    if (std::strcmp(current, s.value) != 0) {
      throw InputError(std::string("environment: ") + s.name + "=" + current + " conflicts with " +
                       s.name + "=" + s.value + " that bitparity pins (" + s.why + "); unset it");
    }
  }
}

}  // namespace

void CheckEnvironmentConflicts(const std::string& device, CpuIsa isa) {
  RequireNoConflict(device, isa, VariablesPinnedHere());
}

void PinEnvironment(const std::string& device, CpuIsa isa) {
  RequireNoConflict(device, isa, {});
  RequireHostRuns(isa, "");
  for (const EnvironmentSetting& s : EnvironmentSettings(device, isa)) {
    const char* current = std::getenv(s.name);
    if (current == nullptr || *current == '\0') {
      ::setenv(s.name, s.value, /*overwrite=*/1);
      std::lock_guard<std::mutex> lock(g_pinned_here_mutex);
      if (std::find(g_pinned_here.begin(), g_pinned_here.end(), s.name) == g_pinned_here.end()) {
        g_pinned_here.push_back(s.name);
      }
    }
  }
  g_pinned_isa.store(isa);
  g_environment_pinned.store(true);
}

CpuIsa PinnedCpuIsa() { return g_pinned_isa.load(); }

std::vector<std::string> VariablesPinnedHere() {
  std::lock_guard<std::mutex> lock(g_pinned_here_mutex);
  return g_pinned_here;
}

std::string AtenCpuCapability() { return at::get_cpu_capability(); }

void ConfigureDeterminism(int64_t intra_op_threads) {
  if (!g_environment_pinned.load()) PinEnvironment("cpu");
  const char* expected = PinOf(PinnedCpuIsa()).expected_capability;
  if (expected != nullptr && AtenCpuCapability() != expected) {
    throw InfrastructureError(std::string("ATen runs its ") + AtenCpuCapability() +
                              " kernels, not the " + expected + " ones [parallel] cpu_isa \"" +
                              ToString(PinnedCpuIsa()) +
                              "\" pins: something computed before the environment was pinned");
  }
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

#include "numerics/provenance.h"

#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <ATen/Version.h>
#include <dlfcn.h>
#include <torch/version.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include "core/cuda_support.h"
#include "numerics/cpu_isa.h"
#include "numerics/determinism.h"

namespace bitparity {
namespace {

// The BLAS LibTorch's fp32 GEMMs go through. PyPI's LibTorch carries MKL inside libtorch_cpu
// (named with its version, read from LibTorch's build configuration); otherwise the shared
// library that provides sgemm_, by file name (not by path: where a library lives does not
// change bits, and the fingerprint must not depend on it).
std::string BlasLibrary() {
  const std::string config = at::show_config();
  const std::string mkl_marker = "Math Kernel Library Version ";
  size_t at = config.find(mkl_marker);
  if (config.find("BLAS_INFO=mkl") != std::string::npos && at != std::string::npos) {
    at += mkl_marker.size();
    return "mkl " + config.substr(at, config.find_first_of(" \n", at) - at);
  }
  void* symbol = dlsym(RTLD_DEFAULT, "sgemm_");
  if (!symbol) return "none";
  Dl_info info;
  if (dladdr(symbol, &info) == 0 || !info.dli_fname) return "unknown";
  std::error_code ec;
  std::filesystem::path resolved = std::filesystem::canonical(info.dli_fname, ec);
  return (ec ? std::filesystem::path(info.dli_fname) : resolved).filename().string();
}

// Where LibTorch was loaded from (provenance only; never part of a fingerprint).
std::string LibTorchLocation() {
  Dl_info info;
  if (dladdr(reinterpret_cast<void*>(&at::show_config), &info) == 0 || !info.dli_fname) {
    return "unknown";
  }
  return info.dli_fname;
}

// "3.10.2": oneDNN's version as LibTorch's build configuration names it ("MKL-DNN v3.10.2").
std::string OneDnnVersion() {
  if (!at::hasMKLDNN()) return "none";
  const std::string config = at::show_config();
  const std::string marker = "MKL-DNN v";
  const size_t at = config.find(marker);
  if (at == std::string::npos) return "unknown";
  const size_t start = at + marker.size();
  return config.substr(start, config.find_first_of(" \n", start) - start);
}

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

}  // namespace

std::map<std::string, std::string> CollectProvenance(int cuda_device) {
  std::map<std::string, std::string> p;
  p["git_revision"] = kGitRevision;
  p["libtorch_version"] = TORCH_VERSION;
  p["libtorch_library"] = LibTorchLocation();
  p["blas"] = BlasLibrary();
  p["mkl_cbwr"] = Env("MKL_CBWR");
  p["blas_threads_env"] = "OPENBLAS_NUM_THREADS=" + Env("OPENBLAS_NUM_THREADS") +
                          " OMP_NUM_THREADS=" + Env("OMP_NUM_THREADS") +
                          " MKL_NUM_THREADS=" + Env("MKL_NUM_THREADS");
  p["onednn"] = at::hasMKLDNN() ? "yes" : "no";
  p["onednn_version"] = OneDnnVersion();
  p["cpu_isa"] = ToString(PinnedCpuIsa());
  p["aten_cpu_capability"] = AtenCpuCapability();
  p["onednn_max_cpu_isa"] = Env("ONEDNN_MAX_CPU_ISA");
  p["intra_op_threads"] = std::to_string(at::get_num_threads());
  p["compiler"] = std::string("gcc ") + __VERSION__;
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  p["host"] = host;
  p["cpu_model"] = HostCpuModel();
  p["cpu_vendor"] = HostCpuVendor();
  p["cpu_flags"] = RelevantCpuFlags(HostCpuFlags());
  p["device"] = "cpu";
  if (cuda_device >= 0) {
    p.merge(cuda::Provenance(cuda_device));
    p["device"] = "cuda";
  }
  return p;
}

}  // namespace bitparity

#include "core/cuda_support.h"

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/cuda_streams.h"
#include "core/errors.h"

#ifdef BITPARITY_WITH_CUDA
#include <ATen/Context.h>
#include <ATen/cuda/CUDAContextLight.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAStream.h>

#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

namespace bitparity {
namespace cuda {

#ifdef BITPARITY_WITH_CUDA

namespace {

// Version numbers come from functions of the CUDA libraries LibTorch has loaded, looked up by
// name (linking them ourselves could load a second copy of a library in another version).
std::string IntVersion(const char* symbol) {
  using Function = int (*)(int*);
  void* address = dlsym(RTLD_DEFAULT, symbol);
  if (address == nullptr) return "unknown";
  int version = 0;
  if (reinterpret_cast<Function>(address)(&version) != 0) return "unavailable";
  return std::to_string(version);
}

// "13.1.0" from cublasGetProperty(MAJOR_VERSION = 0, MINOR = 1, PATCH = 2).
std::string CublasVersion() {
  using Function = int (*)(int, int*);
  void* address = dlsym(RTLD_DEFAULT, "cublasGetProperty");
  if (address == nullptr) return "unknown";
  int part[3] = {0, 0, 0};
  for (int i = 0; i < 3; ++i) {
    if (reinterpret_cast<Function>(address)(i, &part[i]) != 0) return "unavailable";
  }
  return std::to_string(part[0]) + "." + std::to_string(part[1]) + "." + std::to_string(part[2]);
}

std::string CudnnVersion() {
  using Function = size_t (*)();
  void* address = dlsym(RTLD_DEFAULT, "cudnnGetVersion");
  if (address == nullptr) return "unknown";
  return std::to_string(reinterpret_cast<Function>(address)());
}

std::string NcclVersion() {
  std::string code = IntVersion("ncclGetVersion");  // e.g. 22809 for 2.28.9
  if (code == "unknown" || code == "unavailable") return code;
  const int v = std::stoi(code);
  return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." +
         std::to_string(v % 100);
}

void CheckDevice(int index) {
  const int count = DeviceCount();
  if (index < 0 || index >= count) {
    throw InputError(
        "cuda: GPU " + std::to_string(index) + " does not exist; this process sees " +
        std::to_string(count) + " (CUDA_VISIBLE_DEVICES=" +
        (std::getenv("CUDA_VISIBLE_DEVICES") ? std::getenv("CUDA_VISIBLE_DEVICES") : "unset") +
        ")");
  }
}

const c10::impl::DeviceGuardImplInterface* Guard() {
  return c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA);
}

}  // namespace

bool Compiled() { return true; }

int DeviceCount() { return static_cast<int>(c10::cuda::device_count()); }

void SetDevice(int index) {
  CheckDevice(index);
  // LibTorch sets up CUDA (the caching allocator among it) lazily, at the first CUDA tensor; the
  // allocator's statistics are asked for before that.
  at::globalContext().lazyInitDevice(c10::DeviceType::CUDA);
  c10::cuda::set_device(static_cast<c10::DeviceIndex>(index));
}

DeviceInfo Info(int index) {
  CheckDevice(index);
  const cudaDeviceProp* p = at::cuda::getDeviceProperties(static_cast<c10::DeviceIndex>(index));
  DeviceInfo info;
  info.name = p->name;
  info.sm_major = p->major;
  info.sm_minor = p->minor;
  info.memory_bytes = static_cast<int64_t>(p->totalGlobalMem);
  char hex[3];
  for (int i = 0; i < 16; ++i) {
    std::snprintf(hex, sizeof(hex), "%02x", static_cast<unsigned char>(p->uuid.bytes[i]));
    info.uuid += hex;
  }
  return info;
}

void ConfigureDeterminism() {
  at::Context& context = at::globalContext();
  context.setDeterministicAlgorithms(true, /*warn_only=*/false);
  context.setAllowTF32CuBLAS(false);
  context.setAllowTF32CuDNN(false);
  context.setAllowFP16ReductionCuBLAS(false);
  context.setAllowBF16ReductionCuBLAS(false);
  context.setDeterministicCuDNN(true);
  context.setBenchmarkCuDNN(false);
}

std::map<std::string, std::string> Provenance(int index) {
  std::map<std::string, std::string> p;
  const DeviceInfo info = Info(index);
  p["gpu_name"] = info.name;
  p["gpu_sm"] = std::to_string(info.sm_major) + "." + std::to_string(info.sm_minor);
  p["gpu_memory_bytes"] = std::to_string(info.memory_bytes);
  p["gpu_uuid"] = info.uuid;
  p["cuda_driver"] = IntVersion("cudaDriverGetVersion");
  p["cuda_runtime"] = IntVersion("cudaRuntimeGetVersion");
  p["cublas"] = CublasVersion();
  p["cudnn"] = CudnnVersion();
  p["nccl"] = NcclVersion();
  const at::Context& context = at::globalContext();
  p["cuda_determinism"] = std::string("deterministic_algorithms=") +
                          (context.deterministicAlgorithms() ? "on" : "off") +
                          " tf32_cublas=" + (context.allowTF32CuBLAS() ? "on" : "off") +
                          " tf32_cudnn=" + (context.allowTF32CuDNN() ? "on" : "off") +
                          " cudnn_deterministic=" + (context.deterministicCuDNN() ? "on" : "off") +
                          " cudnn_benchmark=" + (context.benchmarkCuDNN() ? "on" : "off");
  std::string environment;
  for (const char* name : {"CUBLAS_WORKSPACE_CONFIG", "NCCL_ALGO", "NCCL_PROTO",
                           "NCCL_MIN_NCHANNELS", "NCCL_MAX_NCHANNELS"}) {
    const char* value = std::getenv(name);
    environment += std::string(environment.empty() ? "" : " ") + name + "=" + (value ? value : "");
  }
  p["cuda_environment"] = environment;
  return p;
}

int64_t AllocatedBytes(int index) {
  const auto stats =
      c10::cuda::CUDACachingAllocator::getDeviceStats(static_cast<c10::DeviceIndex>(index));
  return stats.allocated_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)]
      .current;
}

int64_t PeakAllocatedBytes(int index) {
  const auto stats =
      c10::cuda::CUDACachingAllocator::getDeviceStats(static_cast<c10::DeviceIndex>(index));
  return stats.allocated_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)]
      .peak;
}

void ResetPeakAllocated(int index) {
  c10::cuda::CUDACachingAllocator::resetPeakStats(static_cast<c10::DeviceIndex>(index));
}

c10::intrusive_ptr<c10d::Backend> MakeNcclBackend(const c10::intrusive_ptr<c10d::Store>& store,
                                                  int rank, int world, int device,
                                                  std::chrono::milliseconds timeout) {
  SetDevice(device);
  auto options = c10d::ProcessGroupNCCL::Options::create(/*is_high_priority_stream=*/false);
  options->timeout = timeout;
  auto group = c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, world, options);
  const at::Device bound(at::kCUDA, static_cast<c10::DeviceIndex>(device));
  group->setBoundDeviceId(bound);
  try {
    group->eagerConnectSingleDevice(bound);
  } catch (const std::exception& e) {
    throw InfrastructureError("rank " + std::to_string(rank) + ": NCCL could not connect on GPU " +
                              std::to_string(device) + ": " + e.what());
  }
  return group;
}

c10::Stream ComputeStream(int device) {
  return Guard()->getStream(
      c10::Device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(device)));
}

c10::Stream NewCommStream(int device) {
  return c10::cuda::getStreamFromPool(/*isHighPriority=*/true,
                                      static_cast<c10::DeviceIndex>(device))
      .unwrap();
}

void RecordStream(const at::Tensor& tensor, const c10::Stream& stream) {
  if (!tensor.defined() || !tensor.is_cuda()) return;
  Guard()->recordDataPtrOnStream(tensor.storage().data_ptr(), stream);
}

c10::Event TimingEvent() {
  return c10::Event(c10::DeviceType::CUDA, c10::EventFlag::BACKEND_DEFAULT);
}

#else  // no GPU path in this build

namespace {

[[noreturn]] void NoGpuPath(const char* what) {
  throw InputError(std::string("cuda: ") + what +
                   " needs the GPU path, and this build has none (its LibTorch has no CUDA, or "
                   "it was configured with -DBITPARITY_CUDA=OFF); use [parallel] device = \"cpu\"");
}

}  // namespace

bool Compiled() { return false; }
int DeviceCount() { return 0; }
void SetDevice(int) { NoGpuPath("selecting a GPU"); }
DeviceInfo Info(int) { NoGpuPath("describing a GPU"); }
void ConfigureDeterminism() { NoGpuPath("configuring CUDA determinism"); }
std::map<std::string, std::string> Provenance(int) { NoGpuPath("describing a GPU"); }
int64_t AllocatedBytes(int) { NoGpuPath("GPU memory statistics"); }
int64_t PeakAllocatedBytes(int) { NoGpuPath("GPU memory statistics"); }
void ResetPeakAllocated(int) { NoGpuPath("GPU memory statistics"); }
c10::intrusive_ptr<c10d::Backend> MakeNcclBackend(const c10::intrusive_ptr<c10d::Store>&, int, int,
                                                  int, std::chrono::milliseconds) {
  NoGpuPath("the NCCL process group");
}
c10::Stream ComputeStream(int) { NoGpuPath("a CUDA stream"); }
c10::Stream NewCommStream(int) { NoGpuPath("a CUDA stream"); }
void RecordStream(const at::Tensor&, const c10::Stream&) { NoGpuPath("a CUDA stream"); }
c10::Event TimingEvent() { NoGpuPath("a CUDA event"); }

#endif

}  // namespace cuda
}  // namespace bitparity

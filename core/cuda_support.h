#ifndef BITPARITY_CORE_CUDA_SUPPORT_H_
#define BITPARITY_CORE_CUDA_SUPPORT_H_

// The GPU side of a rank, without LibTorch in the interface: which GPUs exist, the determinism
// switches and provenance of the CUDA libraries, the caching allocator's statistics. The NCCL
// process group, streams and events are in core/cuda_streams.h.
//
// Everything here goes through LibTorch's own CUDA libraries (c10_cuda, torch_cuda and the
// CUDA, cuBLAS and NCCL libraries they load), never a second copy. In a build without the GPU
// path (a LibTorch without CUDA, or -DBITPARITY_CUDA=OFF) Compiled() is false, DeviceCount()
// is 0, and the functions that need a GPU throw InputError saying so.

#include <cstdint>
#include <map>
#include <string>

namespace bitparity {
namespace cuda {

// Whether this build has the GPU path.
bool Compiled();
// The CUDA devices this process sees (CUDA_VISIBLE_DEVICES applies); 0 without the GPU path or
// without a usable driver.
int DeviceCount();

// Makes GPU `index` the current device of this process. InputError if it does not exist.
void SetDevice(int index);

struct DeviceInfo {
  std::string name;  // e.g. "NVIDIA H200"
  int sm_major = 0;
  int sm_minor = 0;
  int64_t memory_bytes = 0;
  std::string uuid;  // identifies the physical GPU across processes
  int sm() const { return sm_major * 10 + sm_minor; }
};
DeviceInfo Info(int index);

// The process-wide switches that make LibTorch's CUDA kernels reproducible: deterministic
// algorithms, no TF32 in cuBLAS or cuDNN, no reduced-precision reductions in fp16/bf16 GEMMs,
// deterministic cuDNN without benchmarking. The environment half (CUBLAS_WORKSPACE_CONFIG,
// NCCL_*) is PinEnvironment("cuda") of numerics/determinism.h, which must run first.
void ConfigureDeterminism();

// GPU name, SM, memory, driver, CUDA runtime, cuBLAS, cuDNN and NCCL versions, and the
// determinism switches in effect, as provenance keys ("gpu_name", "cuda_runtime", ...).
std::map<std::string, std::string> Provenance(int index);

// The caching allocator's statistics for GPU `index`: bytes allocated now, the peak since the
// last reset, and a reset of that peak to the current level.
int64_t AllocatedBytes(int index);
int64_t PeakAllocatedBytes(int index);
void ResetPeakAllocated(int index);

}  // namespace cuda
}  // namespace bitparity

#endif  // BITPARITY_CORE_CUDA_SUPPORT_H_

#ifndef BITPARITY_NUMERICS_CPU_ISA_H_
#define BITPARITY_NUMERICS_CPU_ISA_H_

// The CPU instruction-set level a rank pins for every library that picks its kernels by the host
// at run time, so that two hosts with different CPUs compute the same bits:
//   ATen's own CPU kernels  ATEN_CPU_CAPABILITY (default, avx2, avx512)
//   oneDNN                  ONEDNN_MAX_CPU_ISA (an upper bound on its JIT kernels)
//   MKL (fp32 GEMMs)        MKL_CBWR, the conditional-numerical-reproducibility branch
// and the way bf16 GEMMs are computed on the CPU (GemmPath). One row per level ([parallel]
// cpu_isa); `native` is the host's best of everything, as LibTorch picks it.
//
// MKL honours a CBWR branch other than COMPATIBLE only on Intel processors: on any other x86
// processor it runs its AUTO branch whatever MKL_CBWR names (MKL_VERBOSE prints
// "CNR:AUTO,STRICT" for MKL_CBWR=AVX2,STRICT on an AMD EPYC). COMPATIBLE (SSE2 without the
// approximate rcpps/rsqrtps) is the one branch that is the same code on every x86 host, so every
// pinned level uses it. This header is torch-free.

#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/enum_names.h"

namespace bitparity {

enum class CpuIsa { kSse42, kAvx2, kAvx512, kNative };

inline constexpr EnumName<CpuIsa> kCpuIsaNames[] = {{CpuIsa::kSse42, "sse4_2"},
                                                    {CpuIsa::kAvx2, "avx2"},
                                                    {CpuIsa::kAvx512, "avx512"},
                                                    {CpuIsa::kNative, "native"}};
const char* ToString(CpuIsa isa);

// How a CPU GEMM with bf16 operands is computed.
enum class GemmPath {
  // LibTorch's own bf16 GEMM (oneDNN): fast where the host has native bf16 instructions
  // (AVX512_BF16, AMX), a slow fallback elsewhere, and different bits on each.
  kNative,
  // The operands up-cast to fp32 (exact), one fp32 GEMM through the pinned MKL branch (fp32
  // accumulation), the result rounded to bf16: what a bf16 GEMM with fp32 accumulation computes,
  // the same bits on every host.
  kFp32Accumulate,
};

inline constexpr EnumName<GemmPath> kGemmPathNames[] = {
    {GemmPath::kNative, "native bf16 GEMM"}, {GemmPath::kFp32Accumulate, "as fp32 GEMM"}};
const char* ToString(GemmPath path);

// One row of the table.
struct CpuIsaPin {
  CpuIsa isa;
  const char* aten_cpu_capability;      // ATEN_CPU_CAPABILITY; nullptr: not pinned
  const char* expected_capability;      // what at::get_cpu_capability() then reports; nullptr: any
  const char* onednn_max_cpu_isa;       // ONEDNN_MAX_CPU_ISA; nullptr: not pinned
  const char* mkl_cbwr;                 // MKL_CBWR (always pinned)
  std::vector<std::string> host_flags;  // /proc/cpuinfo flags a host needs for this level
  GemmPath bf16_gemm;
};

// The row of `isa`.
const CpuIsaPin& PinOf(CpuIsa isa);

// This host's CPU flags (/proc/cpuinfo's first "flags" line), its vendor ("GenuineIntel",
// "AuthenticAMD", ...) and model name.
std::set<std::string> HostCpuFlags();
std::string HostCpuVendor();
std::string HostCpuModel();

// The flags of `isa`'s level that `flags` lacks (empty: a host with `flags` runs it).
std::vector<std::string> MissingCpuFlags(CpuIsa isa, const std::set<std::string>& flags);

// The levels a host with `flags` can pin, in table order ("native" always).
std::vector<CpuIsa> SupportedCpuIsas(const std::set<std::string>& flags);

// The CPU flags that select different kernels in one of the libraries, for a message or a
// `native` fingerprint: "avx avx2 avx512bw avx512f fma sse4_2".
std::string RelevantCpuFlags(const std::set<std::string>& flags);

// InputError unless a CPU with `flags` runs `isa`: "[parallel] cpu_isa \"avx512\" needs the CPU
// flags avx512bw avx512dq, which this host (AMD EPYC) lacks; its flags: avx avx2 fma sse4_2; it
// runs: sse4_2, avx2, native". `where` prefixes the message (the recipe's path).
void RequireCpuRuns(CpuIsa isa, const std::set<std::string>& flags, const std::string& cpu_model,
                    const std::string& where);
// RequireCpuRuns for this host.
void RequireHostRuns(CpuIsa isa, const std::string& where);

}  // namespace bitparity

#endif  // BITPARITY_NUMERICS_CPU_ISA_H_

#include "numerics/cpu_isa.h"

#include <fstream>
#include <sstream>

#include "core/errors.h"

namespace bitparity {
namespace {

// ATen's avx512 kernels need AVX-512 F, BW, VL and DQ with FMA (its own test at start-up);
// oneDNN's AVX512_CORE the same four.
const CpuIsaPin kPins[] = {
    {CpuIsa::kSse42,
     "default",
     "DEFAULT",
     "SSE41",
     "COMPATIBLE",
     {"sse4_1", "sse4_2"},
     GemmPath::kFp32Accumulate},
    {CpuIsa::kAvx2,
     "avx2",
     "AVX2",
     "AVX2",
     "COMPATIBLE",
     {"avx", "avx2", "fma"},
     GemmPath::kFp32Accumulate},
    {CpuIsa::kAvx512,
     "avx512",
     "AVX512",
     "AVX512_CORE",
     "COMPATIBLE",
     {"avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512dq"},
     GemmPath::kFp32Accumulate},
    // MKL's strict reproducibility mode on the host's own branch: fp32 GEMM bits independent of
    // the thread count and of operand alignment, but not of the host.
    {CpuIsa::kNative, nullptr, nullptr, nullptr, "AUTO,STRICT", {}, GemmPath::kNative},
};

// The CPU flags that change which kernel one of the libraries runs.
const char* const kRelevantFlags[] = {
    "sse4_1",   "sse4_2",   "avx",         "avx2",        "fma",         "avx512f",  "avx512bw",
    "avx512vl", "avx512dq", "avx512_bf16", "avx512_vnni", "avx512_fp16", "amx_bf16", "amx_tile"};

std::string CpuInfoField(const std::string& field) {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field, 0) != 0) continue;
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    const std::string value = line.substr(colon + 1);
    const size_t start = value.find_first_not_of(" \t");
    return start == std::string::npos ? "" : value.substr(start);
  }
  return "";
}

std::string Joined(const std::vector<std::string>& words, const char* separator) {
  std::string out;
  for (const std::string& w : words) out += (out.empty() ? "" : separator) + w;
  return out;
}

}  // namespace

const char* ToString(CpuIsa isa) { return NameIn(kCpuIsaNames, isa); }

const char* ToString(GemmPath path) { return NameIn(kGemmPathNames, path); }

const CpuIsaPin& PinOf(CpuIsa isa) {
  for (const CpuIsaPin& pin : kPins) {
    if (pin.isa == isa) return pin;
  }
  throw std::logic_error("PinOf: a CpuIsa without a row");
}

std::set<std::string> HostCpuFlags() {
  std::istringstream words(CpuInfoField("flags"));
  std::set<std::string> flags;
  std::string flag;
  while (words >> flag) flags.insert(flag);
  return flags;
}

std::string HostCpuVendor() { return CpuInfoField("vendor_id"); }

std::string HostCpuModel() { return CpuInfoField("model name"); }

std::vector<std::string> MissingCpuFlags(CpuIsa isa, const std::set<std::string>& flags) {
  std::vector<std::string> missing;
  for (const std::string& f : PinOf(isa).host_flags) {
    if (!flags.count(f)) missing.push_back(f);
  }
  return missing;
}

std::vector<CpuIsa> SupportedCpuIsas(const std::set<std::string>& flags) {
  std::vector<CpuIsa> out;
  for (const CpuIsaPin& pin : kPins) {
    if (MissingCpuFlags(pin.isa, flags).empty()) out.push_back(pin.isa);
  }
  return out;
}

std::string RelevantCpuFlags(const std::set<std::string>& flags) {
  std::set<std::string> present;
  for (const char* f : kRelevantFlags) {
    if (flags.count(f)) present.insert(f);
  }
  return Joined(std::vector<std::string>(present.begin(), present.end()), " ");
}

void RequireHostRuns(CpuIsa isa, const std::string& where) {
  RequireCpuRuns(isa, HostCpuFlags(), HostCpuModel(), where);
}

void RequireCpuRuns(CpuIsa isa, const std::set<std::string>& flags, const std::string& cpu_model,
                    const std::string& where) {
  const std::vector<std::string> missing = MissingCpuFlags(isa, flags);
  if (missing.empty()) return;
  std::vector<std::string> runs;
  for (CpuIsa s : SupportedCpuIsas(flags)) runs.push_back(ToString(s));
  throw InputError(
      where + "[parallel] cpu_isa \"" + ToString(isa) + "\" needs the CPU flag" +
      (missing.size() > 1 ? "s " : " ") + Joined(missing, " ") + ", which this host (" + cpu_model +
      ") lacks; its flags: " + RelevantCpuFlags(flags) + "; it runs: " + Joined(runs, ", "));
}

}  // namespace bitparity

#include "harness/fingerprint.h"

#include <cinttypes>
#include <cstdio>

#include "core/cuda_support.h"
#include "numerics/cpu_isa.h"
#include "numerics/provenance.h"
#include "trace/digest.h"
#include "trace/trace_keys.h"

namespace bitparity {
namespace {

// What decides the bits on every host: the libraries, the CPU level they are pinned to, the
// compiler of bitparity's own code and the device.
const char* const kFields[] = {"libtorch_version", "blas",     "onednn_version",
                               "cpu_isa",          "compiler", "device"};
// At cpu_isa "native" the libraries run the host's best kernels: its CPU decides too.
const char* const kNativeFields[] = {"cpu_vendor", "cpu_flags"};
// On GPUs also the GPU model and the libraries whose kernels produce the bits (not the driver).
const char* const kCudaFields[] = {"gpu_name", "gpu_sm", "cuda_runtime", "cublas", "cudnn", "nccl"};

}  // namespace

Fingerprint MakeFingerprint(const std::map<std::string, std::string>& provenance,
                            int64_t threads_per_rank, int64_t world_size) {
  Fingerprint f;
  for (const char* field : kFields) {
    auto it = provenance.find(field);
    f.fields[field] = it == provenance.end() ? "unknown" : it->second;
  }
  if (f.fields["cpu_isa"] == ToString(CpuIsa::kNative)) {
    for (const char* field : kNativeFields) {
      auto it = provenance.find(field);
      f.fields[field] = it == provenance.end() ? "unknown" : it->second;
    }
  }
  if (f.fields["device"] == "cuda") {
    for (const char* field : kCudaFields) {
      auto it = provenance.find(field);
      f.fields[field] = it == provenance.end() ? "unknown" : it->second;
    }
  }
  f.fields["threads_per_rank"] = std::to_string(threads_per_rank);
  f.fields["world_size"] = std::to_string(world_size);
  std::string canonical;
  for (const auto& [key, value] : f.fields) canonical += key + "=" + value + "\n";
  char hex[32];
  std::snprintf(hex, sizeof(hex), "%016" PRIx64, Digest(canonical.data(), canonical.size()));
  f.key = f.fields["device"] + "-" + std::string(hex).substr(0, 12);
  return f;
}

Fingerprint LocalFingerprint(const Recipe& recipe) {
  // The ranks pin the recipe's level before they compute; this process need not.
  const int gpu = recipe.parallel.device == DeviceKind::kCuda && cuda::DeviceCount() > 0 ? 0 : -1;
  std::map<std::string, std::string> provenance = CollectProvenance(gpu);
  provenance["cpu_isa"] = ToString(recipe.parallel.cpu_isa);
  return MakeFingerprint(provenance, recipe.parallel.threads, recipe.world_size());
}

Fingerprint TraceFingerprint(const Trace& trace) {
  std::map<std::string, std::string> provenance;
  const std::string prefix = trace_keys::kProvenancePrefix;
  for (const auto& [key, value] : trace.ranks.at(0).attributes) {
    if (key.rfind(prefix, 0) == 0) provenance[key.substr(prefix.size())] = value;
  }
  int64_t threads = 0, world = static_cast<int64_t>(trace.ranks.size());
  try {
    threads = std::stoll(trace.attribute(trace_keys::kThreadsPerRank));
  } catch (const std::exception&) {
    threads = 0;
  }
  return MakeFingerprint(provenance, threads, world);
}

std::string Fingerprint::DifferingFields(const Fingerprint& other) const {
  std::string out;
  for (const auto& [key, value] : fields) {
    auto it = other.fields.find(key);
    if (it == other.fields.end() || it->second != value) out += (out.empty() ? "" : ", ") + key;
  }
  return out;
}

std::string Fingerprint::Describe() const {
  std::string out = key + " (";
  bool first = true;
  for (const auto& [field, value] : fields) {
    out += (first ? "" : ", ") + field + "=" + value;
    first = false;
  }
  return out + ")";
}

}  // namespace bitparity

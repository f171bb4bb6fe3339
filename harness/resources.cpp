#include "harness/resources.h"

#include <unistd.h>

#include <cstdio>

#include "core/errors.h"
#include "numerics/cpu_isa.h"
#include "numerics/determinism.h"

namespace bitparity {

namespace {

std::string Gib(double bytes) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f GiB", bytes / (1024.0 * 1024.0 * 1024.0));
  return text;
}

}  // namespace

MachineResources LocalMachine() {
  MachineResources machine;
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
  machine.memory_bytes = pages > 0 && page > 0 ? static_cast<int64_t>(pages) * page : 0;
  const long cores = ::sysconf(_SC_NPROCESSORS_ONLN);
  machine.cores = cores > 0 ? cores : 1;
  machine.cpu_flags = HostCpuFlags();
  machine.cpu_model = HostCpuModel();
  return machine;
}

int64_t ModelStateBytes(const Recipe& recipe) {
  const ModelConfig& m = recipe.model;
  int64_t moe_layers = m.mtp_layers > 0 && m.mtp_is_moe() ? m.mtp_layers : 0;
  for (int64_t l = 0; l < m.layers; ++l) moe_layers += m.layer_is_moe(l) ? 1 : 0;
  const double experts = static_cast<double>(moe_layers) * static_cast<double>(m.experts) * 3.0 *
                         static_cast<double>(m.moe_ffn) * static_cast<double>(m.hidden);
  const double dense = static_cast<double>(ParameterCount(m)) - experts;
  const double bytes = 16.0 * (dense * static_cast<double>(recipe.parallel.ep) + experts);
  return bytes > 9.0e18 ? INT64_MAX : static_cast<int64_t>(bytes);
}

std::vector<std::string> CheckResources(const Recipe& recipe, const MachineResources& machine) {
  const int64_t needed = ModelStateBytes(recipe);
  if (machine.memory_bytes > 0 && needed > machine.memory_bytes) {
    throw InputError(recipe.path + ": [model] and [parallel] need at least " +
                     Gib(static_cast<double>(needed)) + " for the model state alone (" +
                     std::to_string(ParameterCount(recipe.model)) +
                     " parameters x 16 bytes of fp32 master, main grad and Adam moments, the "
                     "dense ones on each of the ep = " +
                     std::to_string(recipe.parallel.ep) + " ranks), and this machine has " +
                     Gib(static_cast<double>(machine.memory_bytes)));
  }
  if (machine.cpu_flags) {
    RequireCpuRuns(recipe.parallel.cpu_isa, *machine.cpu_flags, machine.cpu_model,
                   recipe.path + ": ");
  }
  CheckEnvironmentConflicts(ToString(recipe.parallel.device), recipe.parallel.cpu_isa);
  std::vector<std::string> warnings;
  const int64_t threads = recipe.world_size() * recipe.parallel.threads;
  if (threads > 4 * machine.cores) {
    warnings.push_back(recipe.path + ": " + std::to_string(recipe.world_size()) + " rank(s) x " +
                       std::to_string(recipe.parallel.threads) + " thread(s) = " +
                       std::to_string(threads) + " threads on " + std::to_string(machine.cores) +
                       " cores: the run will be slow (its bits do not depend on it)");
  }
  return warnings;
}

}  // namespace bitparity

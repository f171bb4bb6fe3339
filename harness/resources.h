#ifndef BITPARITY_HARNESS_RESOURCES_H_
#define BITPARITY_HARNESS_RESOURCES_H_

// Whether a recipe can run on this machine at all, checked before any rank starts: a model whose
// state cannot fit in memory, a CPU without the recipe's pinned instruction-set level and an
// environment that sets a pinned variable otherwise are bad input with the figures (instead of a
// rank failing later), and rank and thread counts far above the cores are warnings.

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "config/recipe.h"

namespace bitparity {

struct MachineResources {
  int64_t memory_bytes = 0;  // physical memory
  int64_t cores = 1;         // online processors
  // The CPU's flags and model name (numerics/cpu_isa.h); nullopt: unknown, not checked.
  std::optional<std::set<std::string>> cpu_flags;
  std::string cpu_model;
};

// This machine's.
MachineResources LocalMachine();

// The least memory the world of `recipe` needs for its model state on one machine: per
// parameter an fp32 master, an fp32 main grad and Adam's two fp32 moments (16 bytes), dense
// parameters once per EP rank of their stage, experts once.
int64_t ModelStateBytes(const Recipe& recipe);

// InputError naming [model] and [parallel] when ModelStateBytes exceeds the machine's memory,
// naming [parallel] cpu_isa when the machine's CPU lacks the level, and naming the variable when
// this process's environment conflicts with what the ranks pin (CheckEnvironmentConflicts);
// otherwise the warnings (possibly none), one line each.
std::vector<std::string> CheckResources(const Recipe& recipe, const MachineResources& machine);

}  // namespace bitparity

#endif  // BITPARITY_HARNESS_RESOURCES_H_

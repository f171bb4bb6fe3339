#ifndef BITPARITY_HARNESS_RESOURCES_H_
#define BITPARITY_HARNESS_RESOURCES_H_

// Whether a recipe can run on this machine at all, checked before any rank starts: a model whose
// state cannot fit in memory is bad input with the estimate (instead of a rank killed minutes
// later), and rank and thread counts far above the cores are warnings with the figures.

#include <cstdint>
#include <string>
#include <vector>

#include "core/recipe.h"

namespace bitparity {

struct MachineResources {
  int64_t memory_bytes = 0;  // physical memory
  int64_t cores = 1;         // online processors
};

// This machine's.
MachineResources LocalMachine();

// The least memory the world of `recipe` needs for its model state on one machine: per
// parameter an fp32 master, an fp32 main grad and Adam's two fp32 moments (16 bytes), dense
// parameters once per EP rank of their stage, experts once.
int64_t ModelStateBytes(const Recipe& recipe);

// InputError naming [model] and [parallel] when ModelStateBytes exceeds the machine's memory;
// otherwise the warnings (possibly none), one line each.
std::vector<std::string> CheckResources(const Recipe& recipe, const MachineResources& machine);

}  // namespace bitparity

#endif  // BITPARITY_HARNESS_RESOURCES_H_

#ifndef BITPARITY_HARNESS_PERTURBATION_CHECK_H_
#define BITPARITY_HARNESS_PERTURBATION_CHECK_H_

// What only a model can tell of a perturbation (BITPARITY_PERTURB or `run --perturb`): whether
// the rank it targets holds the parameter it names, and the element. Before any run, each arm a
// perturbation reaches starts its ranks once with --check-switches: they build their model, the
// target rank checks the perturbation against it, and every rank exits without training or
// writing a part. A perturbation that cannot apply is then bad input (InputError naming the rank
// and what it lacks) before anything is locked, written or trained. The ranks' logs go to a
// temporary folder, removed after.

#include <string>
#include <vector>

#include "config/recipe.h"
#include "harness/arm_runs.h"

namespace bitparity {

void CheckPerturbationTargets(const Recipe& recipe, const std::vector<std::string>& arms,
                              const std::vector<Perturbation>& perturbations);

}  // namespace bitparity

#endif  // BITPARITY_HARNESS_PERTURBATION_CHECK_H_

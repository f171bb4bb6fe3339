#ifndef BITPARITY_RUNTIME_PLAN_COMMAND_H_
#define BITPARITY_RUNTIME_PLAN_COMMAND_H_

// `bitparity plan RECIPE --arm NAME [--json]`: the schedule of one iteration of an arm, printed
// without training: its recompute segments and, for the overlap engine, every node operation
// in order (node, layer, microbatch, forward / backward / replay, compute / comm).

#include <string>

namespace bitparity {

// Returns the exit code; throws InputError for a bad recipe or arm.
int PrintPlan(const std::string& recipe_path, const std::string& arm, bool json);

}  // namespace bitparity

#endif  // BITPARITY_RUNTIME_PLAN_COMMAND_H_

#include "core/determinism.h"

#include <ATen/Context.h>
#include <ATen/Parallel.h>

namespace bitparity {

void ConfigureDeterminism(int64_t intra_op_threads) {
  at::set_num_threads(static_cast<int>(intra_op_threads));
  static bool interop_set = [] {
    at::set_num_interop_threads(1);
    return true;
  }();
  (void)interop_set;
  at::globalContext().setDeterministicAlgorithms(true, /*warn_only=*/false);
}

}  // namespace bitparity

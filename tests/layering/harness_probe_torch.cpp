// A harness source that includes LibTorch: it must not compile (harness_torch_free_test.sh).
#include <ATen/ATen.h>

#include "harness/checks.h"

int HarnessProbeTorch() { return static_cast<int>(at::kFloat); }

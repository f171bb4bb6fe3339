// The control of harness_torch_free_test.sh: the same wiring with torch-free headers compiles.
#include "core/trace.h"
#include "harness/checks.h"

int HarnessProbeTorchFree() { return static_cast<int>(bitparity::Verdict::kPass); }

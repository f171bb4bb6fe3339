// The control of harness_torch_free_test.sh: the same wiring with torch-free headers compiles.
#include "harness/checks.h"
#include "trace/trace.h"

int HarnessProbeTorchFree() { return static_cast<int>(bitparity::Verdict::kPass); }

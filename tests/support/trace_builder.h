#ifndef BITPARITY_TESTS_SUPPORT_TRACE_BUILDER_H_
#define BITPARITY_TESTS_SUPPORT_TRACE_BUILDER_H_

// Small synthetic traces for tests of trace storage and comparison.

#include <cstdint>

#include "trace/trace.h"

namespace bitparity::testing {

// A trace of `ranks` ranks, `iterations` iterations and two parameters per rank
// ("w" of shape [3, 4] and "b" of shape [4]), with grads dumped at iteration 2.
Trace MakeTrace(int64_t ranks, int64_t iterations);

}  // namespace bitparity::testing

#endif  // BITPARITY_TESTS_SUPPORT_TRACE_BUILDER_H_

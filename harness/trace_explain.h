#ifndef BITPARITY_HARNESS_TRACE_EXPLAIN_H_
#define BITPARITY_HARNESS_TRACE_EXPLAIN_H_

// Why two traces of one recipe and arm differ, for traces recorded under different fingerprints
// (a golden of another machine class, `bitparity diff --explain`): the fingerprint fields that
// differ, the first divergent iteration and record with its ULP distance, how many records
// differ, and, when both traces hold node probes, each rank's first divergent operation. It
// explains; it gates nothing.

#include <string>
#include <vector>

#include "harness/probe_compare.h"
#include "harness/trace_compare.h"
#include "trace/trace.h"

namespace bitparity {

struct TraceExplanation {
  // "cpu_isa: avx2 (a) vs native (b)", one per differing fingerprint field.
  std::vector<std::string> fingerprint_differences;
  TraceComparison records;
  bool probes_compared = false;             // both traces hold node probes
  std::vector<ProbeDivergence> operations;  // each rank's first divergent operation

  // The explanation, one fact per line, `a_name` and `b_name` naming the two sides.
  std::string Describe(const std::string& a_name, const std::string& b_name) const;
};

TraceExplanation ExplainTraces(const Trace& a, const Trace& b);

}  // namespace bitparity

#endif  // BITPARITY_HARNESS_TRACE_EXPLAIN_H_

#ifndef BITPARITY_HARNESS_TRACE_COMPARE_H_
#define BITPARITY_HARNESS_TRACE_COMPARE_H_

// Bitwise comparison of two traces, record by record in iteration order, then rank order. The
// first difference is localized: iteration, rank, record and parameter, and for tensors stored
// in both traces the first differing element with both values, their ULP distance, the number
// of differing elements, the largest absolute difference and a histogram of ULP distances.

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "trace/digest.h"  // HexDigest, which the comparisons' sentences use
#include "trace/trace.h"

namespace bitparity {

// Element-level comparison of one tensor present in both traces.
struct TensorComparison {
  std::string name;
  std::vector<int64_t> shape;
  int64_t elements = 0;
  int64_t differing = 0;
  int64_t first_index = -1;             // flat index of the first differing element
  std::vector<int64_t> first_position;  // the same as a multi-index
  float first_a = 0, first_b = 0;
  uint64_t first_ulps = 0;
  double max_abs_diff = 0;
  uint64_t max_ulps = 0;
  std::vector<std::pair<std::string, int64_t>> ulp_histogram;  // bucket label -> count

  std::string Describe() const;
};

TensorComparison CompareTensors(const TensorDump& a, const TensorDump& b);

struct Difference {
  int64_t iteration = -1;  // -1 for differences in the trace's structure
  int64_t rank = -1;
  std::string record;  // loss, lm_loss, mtp_loss, aux_loss, grad_norm, learning_rate,
                       // grad_digest, grad_dump, param_digest or structure
  std::string param;   // the parameter, for per-parameter records
  std::string detail;  // values / digests as text
  std::optional<TensorComparison> tensor;

  std::string Describe() const;
};

// What to compare.
struct CompareScope {
  bool losses = true;  // loss, lm_loss, mtp_loss, aux_loss
  bool grads = true;   // grad_norm, grad digests, grad dumps
  bool params = true;  // learning_rate, parameter digests
  int64_t keep = 1;    // how many differences to keep (the first ones, in comparison order)
};

struct TraceComparison {
  bool identical = true;
  std::optional<Difference> first;
  std::vector<Difference> kept;  // the first CompareScope::keep differences
  int64_t differing_records = 0;
  int64_t compared_records = 0;
};

TraceComparison CompareTraces(const Trace& a, const Trace& b, const CompareScope& scope = {});

// The dump of `param` at `iteration` on `rank`, or nullptr.
const TensorDump* FindDump(const Trace& trace, int64_t rank, int64_t iteration,
                           const std::string& param);

}  // namespace bitparity

#endif  // BITPARITY_HARNESS_TRACE_COMPARE_H_

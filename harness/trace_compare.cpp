#include "harness/trace_compare.h"

#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>
#include <type_traits>

#include "numerics/float_bits.h"

namespace bitparity {

namespace {

std::string Float(double v) {
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), "%.9g", v);
  return buffer;
}

// Histogram buckets of ULP distances: 1, 2, 3-4, 5-8, ..., (2^(k-1), 2^k], and ">2^40".
constexpr uint64_t kLargestBucket = uint64_t{1} << 40;

uint64_t UlpBucketKey(uint64_t ulps) {
  if (ulps <= 2) return ulps;
  if (ulps > kLargestBucket) return UINT64_MAX;
  uint64_t key = 4;
  while (key < ulps) key <<= 1;
  return key;
}

std::string UlpBucketLabel(uint64_t key) {
  if (key <= 2) return std::to_string(key);
  if (key == UINT64_MAX) return ">" + std::to_string(kLargestBucket);
  return std::to_string(key / 2 + 1) + "-" + std::to_string(key);
}

std::vector<int64_t> Unflatten(int64_t index, const std::vector<int64_t>& shape) {
  std::vector<int64_t> position(shape.size(), 0);
  for (size_t d = shape.size(); d-- > 0;) {
    if (shape[d] == 0) break;
    position[d] = index % shape[d];
    index /= shape[d];
  }
  return position;
}

std::string Position(const std::vector<int64_t>& position) {
  std::string out = "[";
  for (size_t i = 0; i < position.size(); ++i) out += (i ? ", " : "") + std::to_string(position[i]);
  return out + "]";
}

class Comparer {
 public:
  Comparer(const Trace& a, const Trace& b, const CompareScope& scope)
      : a_(a), b_(b), scope_(scope) {}

  TraceComparison Run() {
    if (!CompareStructure()) return result_;
    const size_t iterations = a_.ranks[0].iterations.size();
    for (size_t i = 0; i < iterations; ++i) {
      for (size_t r = 0; r < a_.ranks.size(); ++r) CompareIteration(r, i);
    }
    return result_;
  }

 private:
  void Report(Difference d) {
    result_.identical = false;
    ++result_.differing_records;
    if (static_cast<int64_t>(result_.kept.size()) < scope_.keep) result_.kept.push_back(d);
    if (!result_.first) result_.first = std::move(d);
  }

  void Structure(const std::string& what) {
    Difference d;
    d.record = "structure";
    d.detail = what;
    Report(d);
  }

  bool CompareStructure() {
    if (a_.ranks.size() != b_.ranks.size()) {
      Structure("the traces have " + std::to_string(a_.ranks.size()) + " and " +
                std::to_string(b_.ranks.size()) + " ranks");
      return false;
    }
    for (size_t r = 0; r < a_.ranks.size(); ++r) {
      const RankTrace& ra = a_.ranks[r];
      const RankTrace& rb = b_.ranks[r];
      if (ra.iterations.size() != rb.iterations.size()) {
        Structure("rank " + std::to_string(r) + " has " + std::to_string(ra.iterations.size()) +
                  " and " + std::to_string(rb.iterations.size()) + " iterations");
        return false;
      }
      for (size_t i = 0; i < ra.iterations.size(); ++i) {
        if (ra.iterations[i].iteration != rb.iterations[i].iteration) {
          Structure("rank " + std::to_string(r) + " records different iteration numbers");
          return false;
        }
      }
      std::map<std::string, size_t> index;
      for (size_t p = 0; p < rb.param_names.size(); ++p) index[rb.param_names[p]] = p;
      if (ra.param_names.size() != rb.param_names.size()) {
        Structure("rank " + std::to_string(r) + " has " + std::to_string(ra.param_names.size()) +
                  " and " + std::to_string(rb.param_names.size()) + " parameters");
        return false;
      }
      std::vector<size_t> mapping;
      for (size_t p = 0; p < ra.param_names.size(); ++p) {
        auto it = index.find(ra.param_names[p]);
        if (it == index.end()) {
          Structure("parameter " + ra.param_names[p] + " of rank " + std::to_string(r) +
                    " is missing from the second trace");
          return false;
        }
        if (ra.param_shapes[p] != rb.param_shapes[it->second]) {
          Structure("parameter " + ra.param_names[p] + " of rank " + std::to_string(r) +
                    " has different shapes");
          return false;
        }
        mapping.push_back(it->second);
      }
      param_map_.push_back(std::move(mapping));
    }
    return true;
  }

  // One scalar record, compared by its bits: fp32 records name their ulp distance, fp64 ones
  // print all 17 digits.
  template <typename T>
  void Scalar(size_t r, const IterationRecord& x, const std::string& name, T a, T b) {
    static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>);
    ++result_.compared_records;
    Difference d;
    if constexpr (std::is_same_v<T, float>) {
      if (FloatBits(a) == FloatBits(b)) return;
      d.detail = Float(a) + " vs " + Float(b) + " (" + std::to_string(UlpDistance(a, b)) + " ulp)";
    } else {
      if (DoubleBits(a) == DoubleBits(b)) return;
      char buffer[96];
      std::snprintf(buffer, sizeof(buffer), "%.17g vs %.17g", a, b);
      d.detail = buffer;
    }
    d.iteration = x.iteration;
    d.rank = static_cast<int64_t>(r);
    d.record = name;
    Report(d);
  }

  void CompareIteration(size_t r, size_t i) {
    const RankTrace& ra = a_.ranks[r];
    const RankTrace& rb = b_.ranks[r];
    const IterationRecord& x = ra.iterations[i];
    const IterationRecord& y = rb.iterations[i];
    if (scope_.losses) {
      Scalar(r, x, "loss", x.loss, y.loss);
      Scalar(r, x, "lm_loss", x.lm_loss, y.lm_loss);
      Scalar(r, x, "mtp_loss", x.mtp_loss, y.mtp_loss);
      Scalar(r, x, "aux_loss", x.aux_loss, y.aux_loss);
    }
    if (scope_.grads) {
      auto dumps_a = ra.grad_dumps.find(x.iteration);
      auto dumps_b = rb.grad_dumps.find(x.iteration);
      const bool dumped = dumps_a != ra.grad_dumps.end() && dumps_b != rb.grad_dumps.end();
      for (size_t p = 0; p < ra.param_names.size(); ++p) {
        const std::string& name = ra.param_names[p];
        ++result_.compared_records;
        const uint64_t da = x.grad_digests[p], db = y.grad_digests[param_map_[r][p]];
        const TensorDump* ta = dumped ? FindDump(a_, ra.rank, x.iteration, name) : nullptr;
        const TensorDump* tb = dumped ? FindDump(b_, rb.rank, y.iteration, name) : nullptr;
        std::optional<TensorComparison> tensor;
        if (ta && tb) {
          TensorComparison c = CompareTensors(*ta, *tb);
          if (c.differing > 0) tensor = c;
        }
        if (da == db && !tensor) continue;
        Difference d;
        d.iteration = x.iteration;
        d.rank = static_cast<int64_t>(r);
        d.record = da != db ? "grad_digest" : "grad_dump";
        d.param = name;
        d.detail = "digest " + HexDigest(da) + " vs " + HexDigest(db);
        d.tensor = tensor;
        Report(d);
      }
      // The norm derives from the gradients: compared after them so that a difference is
      // reported at the tensor that caused it.
      Scalar(r, x, "grad_norm", x.grad_norm, y.grad_norm);
    }
    if (scope_.params) {
      Scalar(r, x, "learning_rate", x.learning_rate, y.learning_rate);
      for (size_t p = 0; p < ra.param_names.size(); ++p) {
        ++result_.compared_records;
        const uint64_t da = x.param_digests[p], db = y.param_digests[param_map_[r][p]];
        if (da == db) continue;
        Difference d;
        d.iteration = x.iteration;
        d.rank = static_cast<int64_t>(r);
        d.record = "param_digest";
        d.param = ra.param_names[p];
        d.detail = "digest " + HexDigest(da) + " vs " + HexDigest(db);
        Report(d);
      }
    }
  }

  const Trace& a_;
  const Trace& b_;
  CompareScope scope_;
  std::vector<std::vector<size_t>> param_map_;  // per rank: a's index -> b's index
  TraceComparison result_;
};

}  // namespace

std::string TensorComparison::Describe() const {
  std::ostringstream out;
  if (differing == 0) {
    out << name << ": all " << elements << " elements identical";
    return out.str();
  }
  out << "first differing element " << first_index << " " << Position(first_position) << ": "
      << Float(first_a) << " vs " << Float(first_b) << " (" << first_ulps << " ulp); " << differing
      << " of " << elements << " elements differ, max |diff| " << Float(max_abs_diff) << ", max "
      << max_ulps << " ulp; ulp histogram:";
  for (const auto& [bucket, count] : ulp_histogram) out << " " << bucket << ":" << count;
  return out.str();
}

TensorComparison CompareTensors(const TensorDump& a, const TensorDump& b) {
  TensorComparison c;
  c.name = a.name;
  c.shape = a.shape;
  c.elements = static_cast<int64_t>(a.values.size());
  if (a.shape != b.shape || a.values.size() != b.values.size()) {
    c.differing = c.elements > 0 ? c.elements : 1;
    c.ulp_histogram.push_back({"shape mismatch", 1});
    return c;
  }
  std::map<uint64_t, int64_t> buckets;  // bucket key -> count, in increasing distance
  for (size_t i = 0; i < a.values.size(); ++i) {
    const float x = a.values[i], y = b.values[i];
    if (FloatBits(x) == FloatBits(y)) continue;
    const uint64_t ulps = UlpDistance(x, y);
    if (c.differing == 0) {
      c.first_index = static_cast<int64_t>(i);
      c.first_position = Unflatten(c.first_index, a.shape);
      c.first_a = x;
      c.first_b = y;
      c.first_ulps = ulps;
    }
    ++c.differing;
    const double diff = std::fabs(static_cast<double>(x) - static_cast<double>(y));
    if (diff > c.max_abs_diff || std::isnan(diff)) c.max_abs_diff = diff;
    if (ulps > c.max_ulps) c.max_ulps = ulps;
    ++buckets[UlpBucketKey(ulps)];
  }
  for (const auto& [key, count] : buckets) c.ulp_histogram.push_back({UlpBucketLabel(key), count});
  return c;
}

std::string Difference::Describe() const {
  std::ostringstream out;
  if (record == "structure") return "the traces differ in structure: " + detail;
  out << "iteration " << iteration << ", rank " << rank << ": ";
  if (record == "grad_digest" || record == "grad_dump") {
    out << "main grad of " << param << " differs (" << detail << ")";
    if (tensor) {
      out << "; " << tensor->Describe();
    } else {
      out << "; not dumped at this iteration (add it to [trace] dump_grads_at to see elements)";
    }
  } else if (record == "param_digest") {
    out << "parameter " << param << " after the step differs (" << detail << ")";
  } else {
    out << record << " differs: " << detail;
  }
  return out.str();
}

const TensorDump* FindDump(const Trace& trace, int64_t rank, int64_t iteration,
                           const std::string& param) {
  if (rank < 0 || rank >= static_cast<int64_t>(trace.ranks.size())) return nullptr;
  const RankTrace& r = trace.ranks[static_cast<size_t>(rank)];
  auto it = r.grad_dumps.find(iteration);
  if (it == r.grad_dumps.end()) return nullptr;
  for (const TensorDump& d : it->second) {
    if (d.name == param) return &d;
  }
  return nullptr;
}

TraceComparison CompareTraces(const Trace& a, const Trace& b, const CompareScope& scope) {
  return Comparer(a, b, scope).Run();
}

}  // namespace bitparity

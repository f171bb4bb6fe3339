#include "harness/trace_explain.h"

#include <set>

#include "harness/fingerprint.h"

namespace bitparity {

TraceExplanation ExplainTraces(const Trace& a, const Trace& b) {
  TraceExplanation e;
  const Fingerprint fa = TraceFingerprint(a);
  const Fingerprint fb = TraceFingerprint(b);
  std::set<std::string> fields;
  for (const auto& [field, value] : fa.fields) fields.insert(field);
  for (const auto& [field, value] : fb.fields) fields.insert(field);
  for (const std::string& field : fields) {
    auto ia = fa.fields.find(field);
    auto ib = fb.fields.find(field);
    const std::string va = ia == fa.fields.end() ? "(none)" : ia->second;
    const std::string vb = ib == fb.fields.end() ? "(none)" : ib->second;
    if (va != vb) e.fingerprint_differences.push_back(field + ": " + va + " vs " + vb);
  }
  e.records = CompareTraces(a, b);
  e.probes_compared = HasProbes(a) && HasProbes(b);
  if (e.probes_compared && !e.records.identical) e.operations = FirstProbeDivergences(a, b);
  return e;
}

std::string TraceExplanation::Describe(const std::string& a_name, const std::string& b_name) const {
  std::string out;
  if (fingerprint_differences.empty()) {
    out += "fingerprints: equal\n";
  } else {
    out += "fingerprints differ (" + a_name + " vs " + b_name + "):\n";
    for (const std::string& d : fingerprint_differences) out += "  " + d + "\n";
  }
  if (records.identical) {
    return out + "records: identical (" + std::to_string(records.compared_records) +
           " compared bit for bit)\n";
  }
  out += "first difference: " + records.first->Describe() + "\n";
  if (records.first->record != "structure") {
    out += std::to_string(records.differing_records) + " of " +
           std::to_string(records.compared_records) + " records differ\n";
  }
  if (!probes_compared) {
    return out +
           "first divergent operation: not named (node probes are needed in both; record "
           "with --probes)\n";
  }
  if (operations.empty()) return out + std::string(kProbesAllEqual) + "\n";
  for (const ProbeDivergence& d : operations) out += d.Describe() + "\n";
  return out;
}

}  // namespace bitparity

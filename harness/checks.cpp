#include "harness/checks.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>
#include <tuple>
#include <utility>

#include "config/recipe_edit.h"
#include "harness/probe_compare.h"
#include "numerics/float_bits.h"
#include "trace/digest.h"
#include "trace/trace_keys.h"

namespace bitparity {

namespace {

std::string Number(double v) {
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), "%.9g", v);
  return buffer;
}

bool Within(double a, double b, uint64_t ulps, const Tolerance& t) {
  switch (t.kind) {
    case Tolerance::Kind::kBitwise:
      return ulps == 0 && std::signbit(a) == std::signbit(b);
    case Tolerance::Kind::kAbsRel:
      return std::fabs(a - b) <= t.atol + t.rtol * std::fabs(b);
    case Tolerance::Kind::kUlps:
      return ulps <= static_cast<uint64_t>(t.ulps);
  }
  return false;
}

// Compares one scalar field over every iteration and rank; returns false at the first violation.
template <typename Get>
bool CompareScalar(const Trace& a, const Trace& b, const std::string& field, Get get,
                   const Tolerance& policy, CheckResult* result, double* max_abs,
                   uint64_t* max_ulps) {
  for (size_t i = 0; i < a.ranks[0].iterations.size(); ++i) {
    for (size_t r = 0; r < a.ranks.size(); ++r) {
      const IterationRecord& x = a.ranks[r].iterations[i];
      const IterationRecord& y = b.ranks[r].iterations[i];
      const auto va = get(x), vb = get(y);
      const uint64_t ulps = UlpDistance(va, vb);
      const double diff = std::fabs(static_cast<double>(va) - static_cast<double>(vb));
      *max_abs = std::max(*max_abs, diff);
      *max_ulps = std::max(*max_ulps, ulps);
      if (Within(static_cast<double>(va), static_cast<double>(vb), ulps, policy)) continue;
      if (result->verdict == Verdict::kFail) continue;  // keep the first, keep measuring
      result->verdict = Verdict::kFail;
      Difference d;
      d.iteration = x.iteration;
      d.rank = static_cast<int64_t>(r);
      d.record = field;
      d.detail = Number(va) + " vs " + Number(vb) + " (" + std::to_string(ulps) + " ulp)";
      result->difference = d;
      result->summary = "first difference at " + d.Describe() + "; policy " + policy.Describe();
    }
  }
  return result->verdict != Verdict::kFail;
}

bool SameShape(const Trace& a, const Trace& b, CheckResult* result) {
  TraceComparison c = CompareTraces(a, b, CompareScope{false, false, false, 1});
  if (c.identical) return true;
  result->verdict = Verdict::kFail;
  result->difference = c.first;
  result->summary = c.first->Describe();
  return false;
}

}  // namespace

void FromComparison(const TraceComparison& c, CheckResult* result, const std::string& what) {
  result->compared_records = c.compared_records;
  result->differing_records = c.differing_records;
  result->figures["compared_records"] = c.compared_records;
  result->figures["differing_records"] = c.differing_records;
  if (c.identical) {
    result->summary = "bit-identical: " + std::to_string(c.compared_records) + " " + what;
    return;
  }
  result->verdict = Verdict::kFail;
  result->difference = c.first;
  result->summary = "first difference at " + c.first->Describe();
  std::ostringstream details;
  details << c.differing_records << " of " << c.compared_records << " records differ; first at "
          << c.first->Describe() << "\n";
  result->details = details.str();
}

void AddFirstDivergentOperations(const Trace& a, const Trace& b, bool across_arms,
                                 CheckResult* result) {
  if (!HasProbes(a) || !HasProbes(b)) return;
  std::vector<std::string> sentences;
  for (const ProbeDivergence& d :
       across_arms ? FirstCrossArmDivergences(a, b) : FirstProbeDivergences(a, b)) {
    sentences.push_back(d.Describe());
  }
  result->first_divergent_operations = std::move(sentences);
  result->details = FirstDivergenceLines(result->first_divergent_operations) + result->details;
}

std::string RecordsDigest(const Trace& trace) {
  std::string bytes;
  auto add = [&](const void* data, size_t size) {
    bytes.append(static_cast<const char*>(data), size);
  };
  for (const RankTrace& rank : trace.ranks) {
    add(&rank.rank, sizeof(rank.rank));
    for (const IterationRecord& it : rank.iterations) {
      add(&it.iteration, sizeof(it.iteration));
      for (float v : {it.loss, it.lm_loss, it.mtp_loss, it.aux_loss}) add(&v, sizeof(v));
      add(&it.grad_norm, sizeof(it.grad_norm));
      add(&it.learning_rate, sizeof(it.learning_rate));
      add(it.grad_digests.data(), it.grad_digests.size() * sizeof(uint64_t));
      add(it.param_digests.data(), it.param_digests.size() * sizeof(uint64_t));
    }
  }
  return HexDigest(Digest(bytes.data(), bytes.size()));
}

CheckResult CheckReproduces(const std::string& arm, const std::vector<const Trace*>& runs) {
  CheckResult result = NewCheck(CheckKind::kReproduces, arm);
  result.figures["runs"] = runs.size();
  nlohmann::json digests = nlohmann::json::array();
  for (const Trace* run : runs) digests.push_back(RecordsDigest(*run));
  result.figures["run_digests"] = digests;
  for (size_t k = 1; k < runs.size(); ++k) {
    TraceComparison c = CompareTraces(*runs[0], *runs[k]);
    FromComparison(c, &result, "records in each of " + std::to_string(runs.size()) + " runs");
    if (result.verdict == Verdict::kFail) {
      result.summary = "run " + std::to_string(k + 1) + " differs from run 1: " + result.summary;
      result.differing_run = static_cast<int64_t>(k + 1);
      result.figures["differing_run"] = k + 1;
      AddFirstDivergentOperations(*runs[0], *runs[k], /*across_arms=*/false, &result);
      return result;
    }
  }
  return result;
}

CheckResult CheckLosses(const std::string& arm, const Trace& a, const std::string& baseline,
                        const Trace& b, const Tolerance& policy) {
  CheckResult result = NewCheck(CheckKind::kLoss, arm, baseline);
  result.figures["policy"] = policy.Describe();
  if (!SameShape(a, b, &result)) return result;
  if (policy.bitwise()) {
    FromComparison(CompareTraces(a, b, CompareScope{true, false, false, 1}), &result,
                   "loss records (loss, lm, mtp, aux)");
    return result;
  }
  double max_abs = 0;
  uint64_t max_ulps = 0;
  CompareScalar(
      a, b, "loss", [](const IterationRecord& r) { return r.loss; }, policy, &result, &max_abs,
      &max_ulps);
  CompareScalar(
      a, b, "lm_loss", [](const IterationRecord& r) { return r.lm_loss; }, policy, &result,
      &max_abs, &max_ulps);
  CompareScalar(
      a, b, "mtp_loss", [](const IterationRecord& r) { return r.mtp_loss; }, policy, &result,
      &max_abs, &max_ulps);
  CompareScalar(
      a, b, "aux_loss", [](const IterationRecord& r) { return r.aux_loss; }, policy, &result,
      &max_abs, &max_ulps);
  result.figures["max_abs_diff"] = max_abs;
  result.figures["max_ulps"] = max_ulps;
  if (result.verdict == Verdict::kPass) {
    result.summary = "within " + policy.Describe() + " (max |diff| " + Number(max_abs) + ", max " +
                     std::to_string(max_ulps) + " ulp)";
  }
  return result;
}

CheckResult CheckGradients(const std::string& arm, const Trace& a, const std::string& baseline,
                           const Trace& b, const Tolerance& policy) {
  CheckResult result = NewCheck(CheckKind::kGradients, arm, baseline);
  result.figures["policy"] = policy.Describe();
  if (!SameShape(a, b, &result)) return result;
  if (policy.bitwise()) {
    CompareScope scope{false, true, false, 1};
    FromComparison(CompareTraces(a, b, scope), &result, "gradient records (norm, every main grad)");
    return result;
  }
  double max_abs = 0;
  uint64_t max_ulps = 0;
  CompareScalar(
      a, b, "grad_norm", [](const IterationRecord& r) { return r.grad_norm; }, policy, &result,
      &max_abs, &max_ulps);
  int64_t tensors = 0;
  for (size_t r = 0; r < a.ranks.size(); ++r) {
    for (const auto& [iteration, dumps] : a.ranks[r].grad_dumps) {
      for (const TensorDump& da : dumps) {
        const TensorDump* db = FindDump(b, static_cast<int64_t>(r), iteration, da.name);
        if (!db || db->values.size() != da.values.size()) continue;
        ++tensors;
        for (size_t i = 0; i < da.values.size(); ++i) {
          const uint64_t ulps = UlpDistance(da.values[i], db->values[i]);
          const double diff = std::fabs(static_cast<double>(da.values[i]) - db->values[i]);
          max_abs = std::max(max_abs, diff);
          max_ulps = std::max(max_ulps, ulps);
          if (Within(da.values[i], db->values[i], ulps, policy) ||
              result.verdict == Verdict::kFail) {
            continue;
          }
          result.verdict = Verdict::kFail;
          Difference d;
          d.iteration = iteration;
          d.rank = static_cast<int64_t>(r);
          d.record = "grad_dump";
          d.param = da.name;
          d.tensor = CompareTensors(da, *db);
          result.difference = d;
          result.summary = "first difference beyond " + policy.Describe() + " at " + d.Describe();
        }
      }
    }
  }
  result.figures["max_abs_diff"] = max_abs;
  result.figures["max_ulps"] = max_ulps;
  result.figures["dumped_tensors_compared"] = tensors;
  if (result.verdict == Verdict::kPass) {
    result.summary = "within " + policy.Describe() + " over the grad norm and " +
                     std::to_string(tensors) + " dumped tensors (max |diff| " + Number(max_abs) +
                     ")";
  }
  return result;
}

CheckResult CheckParameters(const std::string& arm, const Trace& a, const std::string& baseline,
                            const Trace& b, const Tolerance& policy) {
  CheckResult result = NewCheck(CheckKind::kParameters, arm, baseline);
  result.figures["policy"] = policy.Describe();
  if (!SameShape(a, b, &result)) return result;
  if (policy.bitwise()) {
    FromComparison(CompareTraces(a, b, CompareScope{false, false, true, 1}), &result,
                   "parameter records (every parameter after every step)");
    return result;
  }
  result.verdict = Verdict::kSkipped;
  result.summary = "parameters are stored as digests only; a tolerance policy cannot compare them";
  return result;
}

int64_t PeakBytes(const Trace& trace) {
  int64_t peak = 0;
  for (const RankTrace& r : trace.ranks) {
    for (const IterationRecord& it : r.iterations) peak = std::max(peak, it.peak_bytes);
  }
  return peak;
}

int64_t RankPeakBytes(const RankTrace& rank) {
  int64_t peak = 0;
  for (const IterationRecord& it : rank.iterations) peak = std::max(peak, it.peak_bytes);
  return peak;
}

int64_t PredictedPeakBytes(const RankTrace& rank) {
  auto it = rank.attributes.find(trace_keys::kMemoryModelPredictedPeakBytes);
  if (it == rank.attributes.end()) return -1;
  try {
    return std::stoll(it->second);
  } catch (const std::exception&) {
    return -1;
  }
}

CheckResult CheckMemoryModel(const std::string& arm, const Trace& trace, double tolerance) {
  CheckResult result = NewCheck(CheckKind::kMemoryModel, arm);
  result.figures["tolerance"] = tolerance;
  double worst = 0;
  std::ostringstream summary;
  for (const RankTrace& rank : trace.ranks) {
    const int64_t measured = RankPeakBytes(rank);
    const int64_t predicted = PredictedPeakBytes(rank);
    if (predicted <= 0) {
      result.verdict = Verdict::kSkipped;
      result.summary = "the trace holds no memory-model prediction";
      return result;
    }
    const double error = static_cast<double>(measured - predicted) / predicted;
    result.figures["ranks"].push_back(
        {{"measured_bytes", measured},
         {"predicted_bytes", predicted},
         {"relative_error", error},
         {"predicted_phase", rank.attributes.count(trace_keys::kMemoryModelPeakPhase)
                                 ? rank.attributes.at(trace_keys::kMemoryModelPeakPhase)
                                 : ""}});
    if (std::fabs(error) > std::fabs(worst)) worst = error;
    char line[160];
    std::snprintf(line, sizeof(line), "%srank %lld measured %.2f MiB, model %.2f MiB (%+.1f%%)",
                  rank.rank ? "; " : "", static_cast<long long>(rank.rank), measured / 1048576.0,
                  predicted / 1048576.0, 100 * error);
    summary << line;
  }
  result.figures["worst_relative_error"] = worst;
  result.summary = summary.str();
  if (std::fabs(worst) > tolerance) result.verdict = Verdict::kFail;
  return result;
}

std::string MemoryCheckName(const MemoryBound& bound) {
  return CheckName(CheckKind::kMemory, bound.arm, bound.of);
}

CheckResult CheckMemory(const MemoryBound& bound, int64_t peak_arm, int64_t peak_of) {
  CheckResult result = NewCheck(CheckKind::kMemory, bound.arm, bound.of);
  const double ratio = peak_of > 0 ? static_cast<double>(peak_arm) / peak_of : 0.0;
  result.figures["peak_bytes"] = peak_arm;
  result.figures["reference_peak_bytes"] = peak_of;
  result.figures["ratio"] = ratio;
  result.figures["at_most"] = bound.at_most;
  if (peak_arm <= 0 || peak_of <= 0) {
    // An external rank that could not count its tensors records -1 (rank attribute memory
    // "unavailable", docs/external-arms.md): no bound can be checked against it.
    result.verdict = Verdict::kSkipped;
    result.summary = std::string("no peak memory recorded by ") +
                     (peak_arm <= 0 ? bound.arm : bound.of) +
                     " (its ranks could not count their tensor bytes)";
    return result;
  }
  char line[200];
  std::snprintf(line, sizeof(line), "peak %.2f MiB = %.3f x %s's %.2f MiB (bound %.3f)",
                peak_arm / 1048576.0, ratio, bound.of.c_str(), peak_of / 1048576.0, bound.at_most);
  result.summary = line;
  if (ratio > bound.at_most) result.verdict = Verdict::kFail;
  return result;
}

double AllToAllTime::hidden_fraction() const {
  if (in_flight_seconds <= 0) return 0.0;
  return std::clamp(1.0 - exposed_seconds / in_flight_seconds, 0.0, 1.0);
}

AllToAllTime AllToAllTimeOf(const Trace& trace) {
  AllToAllTime time;
  for (const RankTrace& rank : trace.ranks) {
    const bool skip_first = rank.iterations.size() > 1;
    for (const IterationRecord& it : rank.iterations) {
      if (skip_first && &it == &rank.iterations.front()) continue;
      time.count += it.comm_count;
      time.in_flight_seconds += it.comm_seconds;
      time.exposed_seconds += it.comm_exposed_seconds;
    }
  }
  return time;
}

CheckResult CheckReplays(const std::string& arm, const std::vector<const Trace*>& runs) {
  CheckResult result = NewCheck(CheckKind::kReplay, arm);
  int64_t compared = 0;
  for (size_t k = 0; k < runs.size(); ++k) {
    int64_t replays = 0;
    const std::vector<ReplayMismatch> mismatches = ReplayMismatches(*runs[k], &replays);
    compared += replays;
    if (mismatches.empty()) continue;
    result.verdict = Verdict::kFail;
    result.summary = "run " + std::to_string(k + 1) + ", " + mismatches.front().Describe();
    nlohmann::json sentences = nlohmann::json::array();
    for (const ReplayMismatch& m : mismatches) {
      sentences.push_back(m.Describe());
      result.details += m.Describe() + "\n";
    }
    result.figures["run"] = k + 1;
    result.figures["mismatches"] = sentences;
    result.figures["replay_records"] = compared;
    return result;
  }
  result.figures["replay_records"] = compared;
  if (compared == 0) {
    result.verdict = Verdict::kSkipped;
    result.summary =
        "no replay was probed (no recompute in this arm, or an engine without node probes)";
    return result;
  }
  result.summary = "bit-identical: " + std::to_string(compared) + " replay outputs in " +
                   std::to_string(runs.size()) + " run(s) equal their first pass";
  return result;
}

CheckResult CheckRecomputeCensus(const std::string& arm, const std::vector<const Trace*>& runs) {
  CheckResult result = NewCheck(CheckKind::kCensus, arm);
  result.figures["segment_slack"] = kCensusSegmentSlack;
  int64_t pairs = 0;
  // The worst pair of consecutive replays of one pass: the largest growth beyond the model's, in
  // segments of the earlier replay.
  double worst = -1e300;
  std::string worst_where;
  const ReplayCensusSample* worst_earlier = nullptr;
  const ReplayCensusSample* worst_later = nullptr;
  for (size_t k = 0; k < runs.size(); ++k) {
    for (const RankTrace& rank : runs[k]->ranks) {
      std::map<std::tuple<int64_t, int64_t, int64_t>, const ReplayCensusSample*> previous;
      for (const ReplayCensusSample& s : rank.replay_census) {
        const ReplayCensusSample*& earlier = previous[{s.iteration, s.chunk, s.microbatch}];
        const ReplayCensusSample* before = earlier;
        earlier = &s;
        if (before == nullptr || before->segment_bytes <= 0) continue;
        ++pairs;
        const double growth = static_cast<double>((s.live_bytes - before->live_bytes) -
                                                  (s.model_bytes - before->model_bytes)) /
                              before->segment_bytes;
        if (growth <= worst) continue;
        worst = growth;
        worst_earlier = before;
        worst_later = &s;
        worst_where = "run " + std::to_string(k + 1) + ", iteration " +
                      std::to_string(s.iteration) + ", rank " + std::to_string(rank.rank) +
                      ", microbatch " + std::to_string(s.microbatch) +
                      (s.chunk > 0 ? ", chunk " + std::to_string(s.chunk) : "");
      }
    }
  }
  result.figures["replay_pairs"] = pairs;
  if (worst_later == nullptr) {
    result.verdict = Verdict::kSkipped;
    result.summary = "no pass replayed two segments (one segment per pass, or none)";
    return result;
  }
  const ReplayCensusSample& a = *worst_earlier;
  const ReplayCensusSample& b = *worst_later;
  result.figures["worst"] = {{"where", worst_where},
                             {"earlier_segment", a.segment},
                             {"later_segment", b.segment},
                             {"live_growth_bytes", b.live_bytes - a.live_bytes},
                             {"model_growth_bytes", b.model_bytes - a.model_bytes},
                             {"segment_bytes", a.segment_bytes},
                             {"excess_segments", worst}};
  char line[400];
  std::snprintf(line, sizeof(line),
                "%s: from segment %lld's replay to segment %lld's, live bytes grew %+.3f MiB, "
                "the model %+.3f MiB: %+.2f of segment %lld's %.3f MiB",
                worst_where.c_str(), static_cast<long long>(a.segment),
                static_cast<long long>(b.segment), (b.live_bytes - a.live_bytes) / 1048576.0,
                (b.model_bytes - a.model_bytes) / 1048576.0, worst,
                static_cast<long long>(a.segment), a.segment_bytes / 1048576.0);
  if (worst > kCensusSegmentSlack) {
    result.verdict = Verdict::kFail;
    result.summary = std::string(line) + " (segment " + std::to_string(a.segment) +
                     " not released before the next replay; the census allows +0.50)";
    return result;
  }
  result.summary =
      std::to_string(pairs) + " replays after another each hold one segment; worst: " + line;
  return result;
}

std::string OverlapCheckName(const OverlapBound& bound) {
  return CheckName(CheckKind::kOverlap, bound.arm);
}

CheckResult CheckOverlap(const OverlapBound& bound, const std::vector<const Trace*>& runs) {
  CheckResult result = NewCheck(CheckKind::kOverlap, bound.arm);
  result.figures["hidden_at_least"] = bound.hidden_at_least;
  nlohmann::json per_run = nlohmann::json::array();
  double worst = 1.0;
  size_t worst_run = 0;
  AllToAllTime worst_time;
  for (size_t i = 0; i < runs.size(); ++i) {
    const AllToAllTime time = AllToAllTimeOf(*runs[i]);
    per_run.push_back({{"count", time.count},
                       {"in_flight_seconds", time.in_flight_seconds},
                       {"exposed_seconds", time.exposed_seconds},
                       {"hidden_fraction", time.hidden_fraction()}});
    if (time.count == 0) {
      result.verdict = Verdict::kFail;
      result.summary = "run " + std::to_string(i + 1) +
                       " ran no all-to-all (an arm with ep = 1 has nothing to hide)";
      result.figures["runs"] = per_run;
      return result;
    }
    if (i == 0 || time.hidden_fraction() < worst) {
      worst = time.hidden_fraction();
      worst_run = i;
      worst_time = time;
    }
  }
  result.figures["runs"] = per_run;
  result.figures["hidden_fraction"] = worst;
  char line[240];
  std::snprintf(line, sizeof(line),
                "%.1f%% of all-to-all time hidden (run %zu of %zu: %.3f s in flight, %.3f s "
                "of it exposed; bound %.1f%%)",
                100.0 * worst, worst_run + 1, runs.size(), worst_time.in_flight_seconds,
                worst_time.exposed_seconds, 100.0 * bound.hidden_at_least);
  result.summary = line;
  if (worst < bound.hidden_at_least) result.verdict = Verdict::kFail;
  return result;
}

CheckResult CheckGolden(const std::string& arm, const Trace& run, const Trace* golden,
                        const std::string& skip_reason) {
  CheckResult result = NewCheck(CheckKind::kGolden, arm);
  if (!skip_reason.empty() || !golden) {
    result.verdict = Verdict::kSkipped;
    result.summary = skip_reason;
    return result;
  }
  // The settings count, not the text: a comment or a reformatting changes no bit, and neither do
  // the checks a recipe asks for ([compare], and restart replay's checkpoints, which run 1 saves
  // and run 2 does not, held equal by "reproduces itself") nor what its traces record ([trace]).
  constexpr const char* kSettingsOfNoBit[] = {"compare.", "trace.",
                                              "train.checkpoint_at:", "train.resume_across_arms:"};
  std::vector<std::string> changes;
  for (std::string& change : RecipeSettingChanges(golden->attribute(trace_keys::kRecipe),
                                                  run.attribute(trace_keys::kRecipe))) {
    const bool of_no_bit = std::any_of(std::begin(kSettingsOfNoBit), std::end(kSettingsOfNoBit),
                                       [&](const char* p) { return change.rfind(p, 0) == 0; });
    if (!of_no_bit) changes.push_back(std::move(change));
  }
  if (!changes.empty()) {
    result.verdict = Verdict::kFail;
    std::string listed;
    for (size_t i = 0; i < changes.size() && i < 5; ++i) listed += (i ? "; " : "") + changes[i];
    if (changes.size() > 5) listed += "; and " + std::to_string(changes.size() - 5) + " more";
    result.summary = "the golden was recorded from a recipe with other settings (" + listed +
                     "); regenerate it with --update-golden";
    for (const std::string& change : changes) result.details += change + "\n";
    return result;
  }
  result.figures["golden_git_revision"] = golden->attribute(trace_keys::kGoldenGitRevision);
  result.figures["golden_created_utc"] = golden->attribute(trace_keys::kGoldenCreatedUtc);
  FromComparison(CompareTraces(*golden, run), &result, "records match the golden");
  return result;
}

}  // namespace bitparity

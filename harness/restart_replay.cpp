#include "harness/restart_replay.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "harness/checks.h"
#include "harness/trace_compare.h"
#include "trace/trace_keys.h"

namespace bitparity {
namespace {

// A position counter each iteration records, and the state a resumed run lost when it differs.
struct PositionCounter {
  const char* record;
  int64_t IterationRecord::*member;
  const char* state;
};
constexpr PositionCounter kPositionCounters[] = {
    {"optimizer_steps", &IterationRecord::optimizer_steps, "the optimizer's step count"},
    {"lr_steps", &IterationRecord::lr_steps, "the LR schedule's position"},
    {"data_batches", &IterationRecord::data_batches, "the data position"},
};

const IterationRecord* RecordOf(const RankTrace& rank, int64_t iteration) {
  for (const IterationRecord& record : rank.iterations) {
    if (record.iteration == iteration) return &record;
  }
  return nullptr;
}

std::vector<std::string> SplitCommas(const std::string& text) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (start <= text.size() && !text.empty()) {
    const size_t comma = text.find(',', start);
    parts.push_back(text.substr(start, comma == std::string::npos ? comma : comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return parts;
}

void Fail(CheckResult* result, Difference difference, const std::string& summary) {
  result->verdict = Verdict::kFail;
  result->summary = summary;
  result->details = summary + "\n";
  result->difference = std::move(difference);
}

// The resumed ranks are the run's, resumed after `after`, holding the iterations after it.
bool SameRanks(const Trace& straight, const Trace& resumed, int64_t after, CheckResult* result) {
  if (resumed.ranks.size() != straight.ranks.size()) {
    Fail(result, {},
         "the resumed run has " + std::to_string(resumed.ranks.size()) + " ranks, run 1 has " +
             std::to_string(straight.ranks.size()));
    return false;
  }
  for (const RankTrace& rank : resumed.ranks) {
    const auto at = rank.attributes.find(trace_keys::kResumedAfterIteration);
    if (at == rank.attributes.end() || at->second != std::to_string(after)) {
      Difference d;
      d.rank = rank.rank;
      d.record = "structure";
      Fail(result, d,
           "rank " + std::to_string(rank.rank) + " did not resume after iteration " +
               std::to_string(after) + " (it says " +
               (at == rank.attributes.end() ? std::string("nothing") : at->second) + ")");
      return false;
    }
  }
  return true;
}

// The masters each rank restored equal run 1's after iteration `after` (run 1 of `arm`; the
// checkpoint is `source`'s).
bool SameMasters(const Trace& straight, const Trace& resumed, int64_t after, const std::string& arm,
                 const std::string& source, CheckResult* result) {
  for (size_t r = 0; r < resumed.ranks.size(); ++r) {
    const RankTrace& rank = resumed.ranks[r];
    const IterationRecord* saved = RecordOf(straight.ranks[r], after);
    const auto digests = rank.attributes.find(trace_keys::kResumedParameterDigests);
    if (saved == nullptr || digests == rank.attributes.end()) {
      Difference d;
      d.rank = rank.rank;
      d.record = "structure";
      Fail(result, d,
           saved == nullptr ? "run 1 of " + arm + " holds no record of iteration " +
                                  std::to_string(after) + " on rank " + std::to_string(rank.rank)
                            : "rank " + std::to_string(rank.rank) +
                                  " of the resumed run recorded no restored masters (" +
                                  trace_keys::kResumedParameterDigests + ")");
      return false;
    }
    const std::vector<std::string> restored = SplitCommas(digests->second);
    for (size_t p = 0; p < saved->param_digests.size(); ++p) {
      const std::string expected = HexDigest(saved->param_digests[p]);
      const std::string got = p < restored.size() ? restored[p] : std::string("(none)");
      if (got == expected) continue;
      Difference d;
      d.iteration = after;
      d.rank = rank.rank;
      d.record = "param_digest";
      d.param = p < rank.param_names.size() ? rank.param_names[p] : std::to_string(p);
      d.detail = expected + " vs " + got;
      const std::string what =
          source == arm ? "the checkpoint does not hold the fp32 masters bit for bit"
                        : source + "'s masters after iteration " + std::to_string(after) +
                              " are not " + arm + "'s: the arms had parted by then (see " + arm +
                              " vs " + source + ": parameters)";
      Fail(result, d,
           "rank " + std::to_string(rank.rank) + " restored the master of " + d.param +
               " with digest " + got + ", run 1's after iteration " + std::to_string(after) +
               " is " + expected + ": " + what);
      return false;
    }
  }
  return true;
}

// Every resumed iteration's position counters equal run 1's.
bool SamePosition(const Trace& straight, const Trace& resumed, CheckResult* result) {
  for (size_t r = 0; r < resumed.ranks.size(); ++r) {
    for (const IterationRecord& record : resumed.ranks[r].iterations) {
      const IterationRecord* expected = RecordOf(straight.ranks[r], record.iteration);
      if (expected == nullptr) continue;  // CompareTraces names a missing iteration
      for (const PositionCounter& counter : kPositionCounters) {
        const int64_t got = record.*counter.member, want = expected->*counter.member;
        if (got == want) continue;
        Difference d;
        d.iteration = record.iteration;
        d.rank = resumed.ranks[r].rank;
        d.record = counter.record;
        d.detail = std::to_string(want) + " vs " + std::to_string(got);
        Fail(result, d,
             "iteration " + std::to_string(record.iteration) + ", rank " + std::to_string(d.rank) +
                 ": " + counter.record + " is " + std::to_string(got) + ", run 1's is " +
                 std::to_string(want) + ": the resumed run lost " + counter.state);
        return false;
      }
    }
  }
  return true;
}

}  // namespace

bool SavesCheckpoints(const Recipe& recipe, const std::string& arm) {
  return !recipe.train.checkpoint_at.empty() && recipe.arm(arm).engine != EngineKind::kExternal;
}

std::vector<PlannedResume> PlanResumes(const Recipe& recipe, const std::vector<std::string>& arms) {
  std::vector<PlannedResume> plan;
  for (const std::string& arm : arms) {
    if (!SavesCheckpoints(recipe, arm)) continue;
    for (int64_t k : recipe.train.checkpoint_at) plan.push_back({arm, arm, k});
  }
  const std::string& baseline = recipe.compare.baseline;
  const bool baseline_saves = std::find(arms.begin(), arms.end(), baseline) != arms.end() &&
                              SavesCheckpoints(recipe, baseline);
  if (!recipe.train.resume_across_arms || !baseline_saves) return plan;
  for (const std::string& arm : arms) {
    if (arm == baseline || !CrossArmResumeProblem(recipe, arm).empty()) continue;
    for (int64_t k : recipe.train.checkpoint_at) plan.push_back({arm, baseline, k});
  }
  return plan;
}

std::string CrossArmResumeProblem(const Recipe& recipe, const std::string& arm) {
  const std::string& baseline = recipe.compare.baseline;
  if (!SavesCheckpoints(recipe, baseline)) {
    return "the baseline is external: an external arm's program saves no checkpoints";
  }
  if (!SavesCheckpoints(recipe, arm)) {
    return "an external arm's program resumes from no checkpoint";
  }
  const PrecisionRecipe own = recipe.arm(arm).precision.recipe;
  const PrecisionRecipe of_baseline = recipe.arm(baseline).precision.recipe;
  if (own != of_baseline) {
    return std::string("its precision (") + ToString(own) + ") is not the baseline's (" +
           ToString(of_baseline) + "): the two arms do not hold the same state to resume from";
  }
  return "";
}

std::string ResumeFolder(const PlannedResume& resume) {
  return resume.arm + "/resume_" + std::to_string(resume.after_iteration) +
         (resume.source == resume.arm ? "" : "_from_" + resume.source);
}

Trace RecordsAfter(const Trace& trace, int64_t iteration) {
  Trace out = trace;
  for (RankTrace& rank : out.ranks) {
    auto& records = rank.iterations;
    records.erase(
        std::remove_if(records.begin(), records.end(),
                       [&](const IterationRecord& r) { return r.iteration <= iteration; }),
        records.end());
    for (auto it = rank.grad_dumps.begin(); it != rank.grad_dumps.end();) {
      it = it->first <= iteration ? rank.grad_dumps.erase(it) : std::next(it);
    }
    auto& probes = rank.probes;
    probes.erase(std::remove_if(probes.begin(), probes.end(),
                                [&](const ProbeRecord& p) { return p.iteration <= iteration; }),
                 probes.end());
  }
  return out;
}

CheckResult CheckResumes(const std::string& arm, const std::string& source, const Trace& straight,
                         const std::vector<std::pair<int64_t, const Trace*>>& resumed) {
  CheckResult result = NewCheck(CheckKind::kResumes, arm, source);
  int64_t compared = 0;
  nlohmann::json resumed_after = nlohmann::json::array();
  for (const auto& [after, trace] : resumed) {
    resumed_after.push_back(after);
    result.figures["resumed_after"] = resumed_after;
    const std::string from = "resumed after iteration " + std::to_string(after);
    if (!SameRanks(straight, *trace, after, &result) ||
        !SameMasters(straight, *trace, after, arm, source, &result) ||
        !SamePosition(straight, *trace, &result)) {
      result.summary = from + ": " + result.summary;
      result.details = from + ": " + result.details;
      return result;
    }
    const Trace expected = RecordsAfter(straight, after);
    FromComparison(CompareTraces(expected, *trace), &result, "records");
    if (result.verdict == Verdict::kFail) {
      result.summary = from + ": " + result.summary;
      result.details = from + ": " + result.details;
      AddFirstDivergentOperations(expected, *trace, /*across_arms=*/source != arm, &result);
      return result;
    }
    compared += result.compared_records;
  }
  result.compared_records = compared;
  result.figures["compared_records"] = compared;
  std::string points;
  for (const auto& entry : resumed) {
    points += (points.empty() ? "" : ", ") + std::to_string(entry.first);
  }
  result.summary = "bit-identical: " + std::to_string(compared) +
                   " records of the runs resumed after iteration " + points +
                   (source == arm ? "" : " from " + source + "'s checkpoints");
  return result;
}

}  // namespace bitparity

#include "harness/probe_compare.h"

#include <cstdio>
#include <map>
#include <tuple>

#include "harness/trace_compare.h"

namespace bitparity {
namespace {

std::string Shape(const std::vector<int64_t>& shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

// The key of an operation's tensor without the phase: what a replay and its first pass share.
using ReplayKey = std::tuple<int64_t, int64_t, int64_t, std::string, std::string, int64_t>;

ReplayKey KeyOf(const ProbeRecord& r) {
  return {r.iteration, r.microbatch, r.chunk, r.layer, r.node, r.slot};
}

}  // namespace

std::string DescribeProbe(const ProbeRecord& r) {
  std::string text = "iteration " + std::to_string(r.iteration) + ", microbatch " +
                     std::to_string(r.microbatch) + ", chunk " + std::to_string(r.chunk);
  if (!r.layer.empty()) text += ", " + r.layer;
  text += ", " + r.node + " " + r.phase + ", ";
  text += (r.phase == "backward" ? "input gradient " : "output ") + std::to_string(r.slot);
  return text;
}

std::string ProbeDivergence::Describe() const {
  std::string text = "rank " + std::to_string(rank) +
                     ": first divergent operation: " + DescribeProbe(a) +
                     (across_arms ? " (its inputs and everything both arms recorded before it are "
                                    "equal; "
                                  : " (everything the rank computed before it is equal; ");
  if (!b) return text + "the other run recorded no more operations)";
  if (KeyOf(a) != KeyOf(*b) || a.phase != b->phase) {
    return text + "the other run ran " + DescribeProbe(*b) + " here instead)";
  }
  if (a.dtype != b->dtype || a.shape != b->shape) {
    return text + "the tensor differs: " + a.dtype + " " + Shape(a.shape) + " vs " + b->dtype +
           " " + Shape(b->shape) + ")";
  }
  return text + "the tensor differs: digest " + HexDigest(a.digest) + " vs " +
         HexDigest(b->digest) + ")";
}

std::string FirstDivergenceLines(const std::optional<std::vector<std::string>>& sentences) {
  if (!sentences) return "";
  if (sentences->empty()) return std::string(kProbesAllEqual) + "\n";
  std::string lines;
  for (const std::string& s : *sentences) lines += s + "\n";
  return lines;
}

bool HasProbes(const Trace& trace) {
  if (trace.ranks.empty()) return false;
  for (const RankTrace& rank : trace.ranks) {
    if (rank.probes.empty()) return false;
  }
  return true;
}

std::vector<ProbeDivergence> FirstProbeDivergences(const Trace& a, const Trace& b) {
  std::vector<ProbeDivergence> found;
  if (!HasProbes(a) || !HasProbes(b)) return found;
  for (size_t r = 0; r < a.ranks.size() && r < b.ranks.size(); ++r) {
    const std::vector<ProbeRecord>& pa = a.ranks[r].probes;
    const std::vector<ProbeRecord>& pb = b.ranks[r].probes;
    for (size_t i = 0; i < pa.size() || i < pb.size(); ++i) {
      if (i >= pa.size()) {  // run a ended first: describe from run b's side
        ProbeDivergence d{a.ranks[r].rank, i, pb[i], std::nullopt};
        found.push_back(d);
        break;
      }
      const bool same = i < pb.size() && KeyOf(pa[i]) == KeyOf(pb[i]) &&
                        pa[i].phase == pb[i].phase && pa[i].dtype == pb[i].dtype &&
                        pa[i].shape == pb[i].shape && pa[i].digest == pb[i].digest;
      if (same) continue;
      ProbeDivergence d{a.ranks[r].rank, i, pa[i], std::nullopt};
      if (i < pb.size()) d.b = pb[i];
      found.push_back(d);
      break;
    }
  }
  return found;
}

std::vector<ProbeDivergence> FirstCrossArmDivergences(const Trace& a, const Trace& b) {
  std::vector<ProbeDivergence> found;
  if (!HasProbes(a) || !HasProbes(b)) return found;
  for (size_t r = 0; r < a.ranks.size() && r < b.ranks.size(); ++r) {
    std::map<std::pair<ReplayKey, std::string>, const ProbeRecord*> baseline;
    for (const ProbeRecord& p : b.ranks[r].probes) {
      if (p.phase == "replay") continue;
      baseline.emplace(std::make_pair(KeyOf(p), p.phase), &p);  // the first of a key
    }
    for (size_t i = 0; i < a.ranks[r].probes.size(); ++i) {
      const ProbeRecord& p = a.ranks[r].probes[i];
      if (p.phase == "replay") continue;
      auto it = baseline.find({KeyOf(p), p.phase});
      if (it == baseline.end()) continue;
      const ProbeRecord& q = *it->second;
      if (p.digest == q.digest && p.dtype == q.dtype && p.shape == q.shape) continue;
      ProbeDivergence d{a.ranks[r].rank, i, p, q};
      d.across_arms = true;
      found.push_back(d);
      break;
    }
  }
  return found;
}

std::string ReplayMismatch::Describe() const {
  return "rank " + std::to_string(rank) + ": " + DescribeProbe(replay) +
         " differs from its first pass (digest " + HexDigest(replay.digest) + " vs " +
         HexDigest(first_pass.digest) +
         (replay.shape != first_pass.shape
              ? ", shape " + Shape(replay.shape) + " vs " + Shape(first_pass.shape)
              : std::string()) +
         ")";
}

std::vector<ReplayMismatch> ReplayMismatches(const Trace& trace, int64_t* replays) {
  std::vector<ReplayMismatch> found;
  int64_t compared = 0;
  for (const RankTrace& rank : trace.ranks) {
    std::map<ReplayKey, const ProbeRecord*> first_pass;
    bool reported = false;
    for (const ProbeRecord& r : rank.probes) {
      if (r.phase == "forward") {
        first_pass.emplace(KeyOf(r), &r);  // the first forward of the key is the first pass
        continue;
      }
      if (r.phase != "replay") continue;
      auto it = first_pass.find(KeyOf(r));
      if (it == first_pass.end()) continue;  // replayed without a probed first pass
      ++compared;
      const ProbeRecord& first = *it->second;
      const bool same =
          r.digest == first.digest && r.shape == first.shape && r.dtype == first.dtype;
      if (!same && !reported) {
        found.push_back({rank.rank, first, r});
        reported = true;
      }
    }
  }
  if (replays) *replays = compared;
  return found;
}

}  // namespace bitparity

#include "harness/throughput.h"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <optional>
#include <string>
#include <utility>

#include "schedule/schedule_vocabulary.h"
#include "trace/trace_keys.h"

namespace bitparity {

double RankThroughput::mfu() const {
  return ceiling_flops_per_second > 0 ? model_flops_per_second() / ceiling_flops_per_second : 0;
}

double Throughput::model_flops_per_second_per_rank() const {
  if (ranks.empty()) return 0;
  double sum = 0;
  for (const RankThroughput& r : ranks) sum += r.model_flops_per_second();
  return sum / static_cast<double>(ranks.size());
}

double Throughput::hardware_flops_per_second_per_rank() const {
  if (ranks.empty()) return 0;
  double sum = 0;
  for (const RankThroughput& r : ranks) sum += r.hardware_flops_per_second();
  return sum / static_cast<double>(ranks.size());
}

double Throughput::mfu() const {
  double achieved = 0, ceiling = 0;
  for (const RankThroughput& r : ranks) {
    if (r.ceiling_flops_per_second <= 0) return 0;
    achieved += r.model_flops_per_second();
    ceiling += r.ceiling_flops_per_second;
  }
  return ceiling > 0 ? achieved / ceiling : 0;
}

Throughput ThroughputOf(const Trace& trace) {
  Throughput out;
  int64_t measured = 0;  // iterations, over ranks (for the per-iteration means)
  for (const RankTrace& rank : trace.ranks) {
    RankThroughput r;
    r.rank = rank.rank;
    auto ceiling = rank.attributes.find(trace_keys::kGemmCeilingFlopsPerSecond);
    if (ceiling != rank.attributes.end()) {
      r.measured_ceiling_flops_per_second = std::strtod(ceiling->second.c_str(), nullptr);
    }
    const bool skip_first = rank.iterations.size() > 1;
    for (const IterationRecord& it : rank.iterations) {
      if (skip_first && &it == &rank.iterations.front()) continue;
      ++r.iterations;
      r.seconds += it.step_seconds;
      r.model_flops += static_cast<double>(it.gemm_flops_forward + it.gemm_flops_backward);
      r.replay_flops += static_cast<double>(it.gemm_flops_replay);
      out.forward_flops += static_cast<double>(it.gemm_flops_forward);
      out.replay_flops += static_cast<double>(it.gemm_flops_replay);
      out.backward_flops += static_cast<double>(it.gemm_flops_backward);
      out.attention_flops += static_cast<double>(it.gemm_flops_attention);
      out.dense_flops += static_cast<double>(it.gemm_flops_dense);
      out.expert_flops += static_cast<double>(it.gemm_flops_expert);
      out.head_flops += static_cast<double>(it.gemm_flops_head);
      out.other_flops += static_cast<double>(it.gemm_flops_other);
    }
    measured = std::max(measured, r.iterations);
    out.ranks.push_back(r);
  }
  if (measured > 0) {
    for (double* v :
         {&out.forward_flops, &out.replay_flops, &out.backward_flops, &out.attention_flops,
          &out.dense_flops, &out.expert_flops, &out.head_flops, &out.other_flops}) {
      *v /= static_cast<double>(measured);
    }
  }
  ShareBestCeiling({&out});
  return out;
}

void ShareBestCeiling(const std::vector<Throughput*>& throughputs) {
  double best = 0;
  for (const Throughput* t : throughputs) {
    for (const RankThroughput& r : t->ranks) {
      best = std::max(best, r.measured_ceiling_flops_per_second);
    }
  }
  for (Throughput* t : throughputs) {
    for (RankThroughput& r : t->ranks) {
      r.ceiling_flops_per_second = r.measured_ceiling_flops_per_second > 0 ? best : 0;
    }
  }
}

AllToAllBreakdown AllToAllBreakdownOf(const Trace& trace) {
  AllToAllBreakdown out;
  std::map<std::pair<std::string, std::string>, AllToAllShare> shares;
  for (const RankTrace& rank : trace.ranks) {
    if (rank.schedule_timeline.empty() || rank.iterations.empty()) continue;
    out.exposed_seconds += rank.iterations.back().comm_exposed_seconds;
    out.count_exchange_seconds += rank.iterations.back().comm_count_exchange_seconds;
    for (const ScheduleInterval& e : rank.schedule_timeline) {
      const std::optional<NodeKind> node = NodeKindNamed(e.node);
      if (!e.comm || !node || !IsAllToAll(*node)) continue;
      AllToAllShare& share = shares[{e.node, e.phase}];
      share.node = e.node;
      share.phase = e.phase;
      ++share.count;
      share.in_flight_seconds += static_cast<double>(e.end_ns - e.begin_ns) * 1e-9;
      share.waited_seconds += static_cast<double>(e.wait_ns) * 1e-9;
      out.waited_seconds += static_cast<double>(e.wait_ns) * 1e-9;
    }
  }
  for (auto& [key, share] : shares) out.shares.push_back(share);
  return out;
}

}  // namespace bitparity

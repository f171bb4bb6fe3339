#include "schedule/pipeline_schedule.h"

#include <algorithm>
#include <stdexcept>

namespace bitparity {
namespace {

int64_t GroupSize(const PipelineScheduleConfig& c) {
  return c.microbatch_group > 0 ? c.microbatch_group : c.pp;
}

// The k-th forward of the interleaved order (Megatron's get_schedule_table): per group of G
// microbatches, every chunk in turn; the last group takes what is left.
std::vector<ChunkPass> ForwardOrder(const PipelineScheduleConfig& c) {
  std::vector<ChunkPass> order;
  const int64_t g = c.vpp > 1 ? GroupSize(c) : c.microbatches;
  for (int64_t low = 0; low < c.microbatches; low += g) {
    const int64_t high = std::min(low + g, c.microbatches);
    for (int64_t chunk = 0; chunk < c.vpp; ++chunk) {
      for (int64_t mb = low; mb < high; ++mb) order.push_back({chunk, mb});
    }
  }
  return order;
}

std::string PassText(char kind, const ChunkPass& p) {
  return std::string(1, kind) + std::to_string(p.chunk) + "." + std::to_string(p.microbatch);
}

}  // namespace

std::string PipelineScheduleProblem(const PipelineScheduleConfig& c) {
  if (c.pp < 1 || c.vpp < 1 || c.microbatches < 1) return "pp, vpp and microbatches must be >= 1";
  if (c.vpp > 1 && c.pp == 1) {
    return "vpp = " + std::to_string(c.vpp) +
           " needs pp > 1 (model chunks interleave across pipeline ranks)";
  }
  if (c.ep_overlap && c.pp > 1 && c.vpp == 1) {
    return "the EP all-to-all overlap with pp = " + std::to_string(c.pp) +
           " needs vpp > 1 (Megatron's rule: a combined step pairs two model chunks)";
  }
  if (c.vpp > 1) {
    const int64_t g = GroupSize(c);
    if ((g < c.pp || g > c.microbatches) && c.microbatch_group > 0) {
      return "microbatch_group_size = " + std::to_string(g) +
             " must lie in [pp, microbatches per pipeline rank] = [" + std::to_string(c.pp) + ", " +
             std::to_string(c.microbatches) + "] (Megatron's rule for the interleaved schedule)";
    }
    if (g < c.pp || g > c.microbatches) {
      return "the interleaved schedule takes microbatches in groups of " + std::to_string(g) +
             " per chunk, which must lie in [pp, microbatches] = [" + std::to_string(c.pp) + ", " +
             std::to_string(c.microbatches) + "]; use at least " + std::to_string(g) +
             " microbatches per pipeline rank";
    }
    const int64_t left = c.microbatches % g;
    if (left > 0 && left < c.pp) {
      return std::to_string(c.microbatches) + " microbatches leave " + std::to_string(left) +
             " after the last full group of " + std::to_string(g) +
             "; the interleaved schedule needs 0 or at least pp = " + std::to_string(c.pp) +
             " left (use a multiple of " + std::to_string(g) + ")";
    }
  }
  return "";
}

std::vector<PipelineStep> PipelineSchedule(const PipelineScheduleConfig& c, int64_t pp_rank) {
  const std::string problem = PipelineScheduleProblem(c);
  if (!problem.empty()) throw std::logic_error("pipeline schedule: " + problem);
  if (pp_rank < 0 || pp_rank >= c.pp) throw std::logic_error("pipeline schedule: no such rank");
  const std::vector<ChunkPass> forward = ForwardOrder(c);
  const int64_t total = static_cast<int64_t>(forward.size());
  int64_t warmup;
  if (c.vpp > 1) {
    warmup = (c.pp - pp_rank - 1) * 2 + (c.vpp - 1) * GroupSize(c) + (c.ep_overlap ? 1 : 0);
  } else {
    warmup = c.pp > 1 ? c.pp - pp_rank - 1 : (c.ep_overlap ? 1 : 0);
  }
  warmup = std::min(warmup, total);
  auto backward = [&](int64_t k) {
    const ChunkPass& f = forward[static_cast<size_t>(k)];
    return ChunkPass{c.vpp - 1 - f.chunk, f.microbatch};
  };
  std::vector<PipelineStep> steps;
  for (int64_t k = 0; k < warmup; ++k) {
    steps.push_back({PipelineStep::Phase::kWarmup, forward[static_cast<size_t>(k)], {}});
  }
  for (int64_t k = 0; k < total - warmup; ++k) {
    steps.push_back(
        {PipelineStep::Phase::kSteady, forward[static_cast<size_t>(k + warmup)], backward(k)});
  }
  for (int64_t k = total - warmup; k < total; ++k) {
    steps.push_back({PipelineStep::Phase::kCooldown, {}, backward(k)});
  }
  return steps;
}

std::string FormatPipelineSchedule(const std::vector<PipelineStep>& steps) {
  std::string out;
  for (size_t i = 0; i < steps.size(); ++i) {
    const PipelineStep& s = steps[i];
    if (i > 0) out += s.phase != steps[i - 1].phase ? " | " : " ";
    if (s.forward.valid() && s.backward.valid()) {
      out += "[" + PassText('F', s.forward) + "+" + PassText('B', s.backward) + "]";
    } else if (s.forward.valid()) {
      out += PassText('F', s.forward);
    } else {
      out += PassText('B', s.backward);
    }
  }
  return out;
}

}  // namespace bitparity

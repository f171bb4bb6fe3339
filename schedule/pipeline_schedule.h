#ifndef BITPARITY_SCHEDULE_PIPELINE_SCHEDULE_H_
#define BITPARITY_SCHEDULE_PIPELINE_SCHEDULE_H_

// The order in which one pipeline rank runs the forwards and backwards of its (model chunk,
// microbatch) pairs, as data: Megatron's 1F1B schedules. Both arms walk the same list; the
// reference arm runs a step's forward and then its backward, the overlap arm merges them into
// one combined step (forward of one pair under the backward of another).
//
//   pp 2, vpp 2, 4 microbatches, rank 0 (reference):
//     F0.0 F0.1 F1.0 F1.1 | [F0.2+B1.0] [F0.3+B1.1] [F1.2+B0.0] [F1.3+B0.1] | B1.2 B1.3 B0.2 B0.3
//
// Interleaved (vpp > 1), from Megatron's forward_backward_pipelining_with_interleaving:
// microbatches go through the chunks in groups of G (microbatch_group_size_per_vp_stage, default
// pp): the k-th forward is chunk table[k] of microbatch mb[k], over the table "for each group:
// for each chunk: for each microbatch of the group"; the k-th backward is chunk vpp - 1 -
// table[k] of the same microbatch. Rank r first runs (pp - r - 1) * 2 + (vpp - 1) * G forwards
// (one more with the EP all-to-all overlap, so that a combined step never pairs a forward and a
// backward of the same chunk and microbatch), then steps of one forward and one backward, then
// the remaining backwards. Without interleaving (vpp 1): pp - r - 1 warm-up forwards (with the
// overlap and pp 1: one, Megatron's combined_1f1b_schedule_for_no_pipelining).

#include <cstdint>
#include <string>
#include <vector>

#include "schedule/pipeline_layout.h"

namespace bitparity {

// A forward or backward of one (model chunk, microbatch) pair.
struct ChunkPass {
  int64_t chunk = -1;  // -1: none
  int64_t microbatch = -1;

  bool valid() const { return chunk >= 0; }
};

// One step of a pipeline rank's schedule: a forward, a backward, or both.
struct PipelineStep {
  enum class Phase { kWarmup, kSteady, kCooldown };
  Phase phase = Phase::kWarmup;
  ChunkPass forward;
  ChunkPass backward;
};

struct PipelineScheduleConfig {
  int64_t pp = 1;
  int64_t vpp = 1;
  int64_t microbatches = 1;      // per pipeline rank and chunk
  int64_t microbatch_group = 0;  // G of the interleaved schedule; 0: pp
  bool ep_overlap = false;       // the overlap arm: one more warm-up forward

  // The schedule of `pipeline`'s ranks with `microbatches` each.
  static PipelineScheduleConfig Of(const PipelineLayout& pipeline, int64_t microbatches,
                                   bool ep_overlap = false) {
    PipelineScheduleConfig config;
    config.pp = pipeline.pp;
    config.vpp = pipeline.vpp;
    config.microbatches = microbatches;
    config.microbatch_group = pipeline.microbatch_group;
    config.ep_overlap = ep_overlap;
    return config;
  }
};

// The rules Megatron's schedules put on a configuration, as a message ("" when it runs):
// vpp > 1 needs pp > 1; interleaved: pp <= G <= microbatches, and the microbatches left over
// after the last full group are 0 or at least pp.
std::string PipelineScheduleProblem(const PipelineScheduleConfig& config);

// The steps of pipeline rank `pp_rank`. Throws std::logic_error when PipelineScheduleProblem()
// is not empty.
std::vector<PipelineStep> PipelineSchedule(const PipelineScheduleConfig& config, int64_t pp_rank);

// "F0.0 F0.1 | [F0.2+B1.0] ... | B1.2 ..." (forward / backward, chunk.microbatch; a step with
// both in brackets; '|' between warm-up, steady state and cool-down).
std::string FormatPipelineSchedule(const std::vector<PipelineStep>& steps);

}  // namespace bitparity

#endif  // BITPARITY_SCHEDULE_PIPELINE_SCHEDULE_H_

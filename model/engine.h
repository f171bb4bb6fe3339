#ifndef BITPARITY_MODEL_ENGINE_H_
#define BITPARITY_MODEL_ENGINE_H_

// The contract between the training loop and an arm: run one iteration's forward and backward
// over this rank's microbatches.

#include <cstdint>
#include <string>
#include <vector>

#include "model/gpt.h"
#include "trace/trace.h"

namespace bitparity {

// The live tensor bytes (MemoryTracker) when one recompute segment's replay was done.
struct SegmentReplayMark {
  SegmentReplayPoint point;
  int64_t live_bytes = 0;
};

class Engine {
 public:
  virtual ~Engine() = default;

  // Runs every microbatch forward and backward. On return each parameter's main grad has grown
  // by the sum of its per-microbatch gradients, flushed once per microbatch in microbatch order
  // (never per backward call), and `.grad` is empty. Returns one entry per microbatch.
  virtual std::vector<MicrobatchLosses> RunIteration(std::vector<ChunkState>& microbatches) = 0;

  // Notes for the run log, e.g. layers a recompute method leaves eager.
  virtual std::vector<std::string> warnings() const = 0;

  // The last iteration's segment replays, in the order they ran: the overlap arm's (its
  // segments' replay_done markers); none for an arm that replays no segment.
  virtual std::vector<SegmentReplayMark> segment_replays() const { return {}; }

  // Records the next iterations' compute and all-to-all intervals (an arm with a schedule of
  // nodes; others record none), and the last iteration's, as (node, microbatch, comm, begin,
  // end) in steady-clock ns.
  virtual void RecordScheduleTimeline(bool /*on*/) {}
  virtual std::vector<ScheduleInterval> ScheduleTimeline() const { return {}; }
};

}  // namespace bitparity

#endif  // BITPARITY_MODEL_ENGINE_H_

#ifndef BITPARITY_OVERLAP_IMPL_RECOMPUTE_SEGMENT_H_
#define BITPARITY_OVERLAP_IMPL_RECOMPUTE_SEGMENT_H_

// A recompute segment of the overlap arm: consecutive layers whose forward runs without a graph,
// whose input and chunk-state snapshot are kept, and whose forward is replayed with grad right
// before the segment's first backward node (full recompute at layer-segment granularity).

#include <ATen/ATen.h>

#include "config/recompute_plan.h"
#include "model/chunk_state_field.h"
#include "model/gpt.h"
#include "overlap_impl/combined_step_plan.h"

namespace bitparity {

class ChunkSchedule;

// A group of consecutive layers whose activations are rebuilt right before their backward.
class RecomputeSegment {
 public:
  explicit RecomputeSegment(const LayerSegment& spec) : spec_(spec) {}

  // Runs one segment operation of the plan: capture, replay (its start), replay done, release.
  void Run(const NodeOp& op, ChunkSchedule* chunk);

  // Before the head layer's forward: keep its input and the chunk state (every mutable field of
  // model/chunk_state_field.h; no RNG state: dropout masks are keyed by their site,
  // ops::Dropout, and nothing else draws at random).
  void Capture(const at::Tensor& input, const ChunkState& state);
  // Before the tail layer's backward: restore the snapshot's fields and turn grad back on for
  // the segment's layers; the plan's replay operations then run every node's forward again from
  // input(). `restores` is the plan's, every field but in a faulty plan.
  void BeginReplay(ChunkSchedule* chunk, const ChunkStateFieldFlags& restores);
  const at::Tensor& input() const { return input_; }
  // After the head layer's backward.
  void Release();

  bool holds_input() const { return input_.defined(); }
  const LayerSegment& spec() const { return spec_; }

 private:
  LayerSegment spec_;
  at::Tensor input_;
  ChunkState snapshot_;
};

}  // namespace bitparity

#endif  // BITPARITY_OVERLAP_IMPL_RECOMPUTE_SEGMENT_H_

#ifndef BITPARITY_CONFIG_RECOMPUTE_PLAN_H_
#define BITPARITY_CONFIG_RECOMPUTE_PLAN_H_

// Which layers full activation recompute replays, and in which groups. Both arms read the same
// plan, so recompute_method / recompute_num_layers mean the same thing in each (Megatron's
// rules, as the seed restates them):
//   uniform k: decoder layers in consecutive groups of k (the last may be shorter); each MTP
//              depth is its own segment; with MTP, k must be 1.
//   block k:   the first k decoder layers, one segment each; the remaining decoder layers keep
//              their activations; MTP layers are not recomputed (a warning says so).
//   unit "chunk" (comparison mode): one segment holding every decoder and MTP layer.
// Layers are numbered decoder 0..L-1, then MTP depth d as L+d.

#include <cstdint>
#include <string>
#include <vector>

#include "config/recipe.h"
#include "schedule/pipeline_layout.h"

namespace bitparity {

struct LayerSegment {
  int64_t first_layer = 0;
  int64_t num_layers = 0;
  bool mtp = false;  // an MTP depth (exactly one layer; false for a whole-chunk segment)

  int64_t last_layer() const { return first_layer + num_layers - 1; }
};

struct RecomputePlan {
  std::vector<LayerSegment> segments;     // in forward order
  std::vector<int64_t> segment_of_layer;  // per layer: index into segments, or -1 (eager)
  std::vector<std::string> warnings;      // e.g. MTP left eager under "block"

  bool recomputed(int64_t layer) const { return segment_of_layer[layer] >= 0; }
  // The segment whose first layer is `layer`, or nullptr.
  const LayerSegment* SegmentStartingAt(int64_t layer) const;
};

// A segment as every command prints it: "[3]" (one decoder layer), "[0-1]", "[mtp0]" (MTP depth
// 0), "[0-mtp0]" (a whole chunk, decoder and MTP layers).
std::string FormatSegment(const LayerSegment& segment, int64_t decoder_layers);
// The plan's segments separated by spaces, or "none".
std::string FormatSegments(const RecomputePlan& plan, int64_t decoder_layers);

// A pipeline chunk's segments are counted within the chunk (its decoder layers from 0, its MTP
// depths after them); these print them in the whole model's numbering: "[4-5] [mtp0]".
LayerSegment InModelNumbering(const LayerSegment& segment, const PipelineStage& stage,
                              int64_t model_layers);
std::string FormatChunkSegments(const RecomputePlan& plan, const PipelineStage& stage,
                                int64_t model_layers);

// Throws InputError when the configuration breaks a rule (method or num_layers missing under
// full recompute, uniform with MTP and num_layers != 1).
RecomputePlan BuildRecomputePlan(const RecomputeConfig& recompute, int64_t decoder_layers,
                                 int64_t mtp_layers);

}  // namespace bitparity

#endif  // BITPARITY_CONFIG_RECOMPUTE_PLAN_H_

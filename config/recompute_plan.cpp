#include "config/recompute_plan.h"

#include <algorithm>

#include "core/errors.h"

namespace bitparity {

const LayerSegment* RecomputePlan::SegmentStartingAt(int64_t layer) const {
  int64_t s = segment_of_layer[layer];
  if (s < 0 || segments[s].first_layer != layer) return nullptr;
  return &segments[s];
}

RecomputePlan BuildRecomputePlan(const RecomputeConfig& recompute, int64_t decoder_layers,
                                 int64_t mtp_layers) {
  RecomputePlan plan;
  plan.segment_of_layer.assign(static_cast<size_t>(decoder_layers + mtp_layers), -1);
  if (!recompute.full() || decoder_layers + mtp_layers == 0) return plan;
  if (recompute.unit == RecomputeUnit::kChunk) {
    // The older overlap behaviour: the whole model chunk (every decoder and MTP layer) is one
    // unit, replayed at once before the chunk's backward.
    plan.segments.push_back({0, decoder_layers + mtp_layers, false});
    std::fill(plan.segment_of_layer.begin(), plan.segment_of_layer.end(), 0);
    return plan;
  }
  if (!recompute.method_set) {
    throw InputError("recompute: method must be \"uniform\" or \"block\" with full recompute");
  }
  const int64_t k = recompute.num_layers;
  if (k < 1) throw InputError("recompute: num_layers must be >= 1 with full recompute");
  auto add = [&](int64_t first, int64_t count, bool mtp) {
    plan.segments.push_back({first, count, mtp});
    for (int64_t l = first; l < first + count; ++l) {
      plan.segment_of_layer[static_cast<size_t>(l)] =
          static_cast<int64_t>(plan.segments.size()) - 1;
    }
  };
  if (recompute.method == RecomputeMethod::kUniform) {
    if (mtp_layers > 0 && k != 1) {
      throw InputError(
          "recompute: num_layers must be 1 when method is \"uniform\" and the model "
          "has MTP layers, got " +
          std::to_string(k));
    }
    for (int64_t first = 0; first < decoder_layers; first += k) {
      add(first, std::min(k, decoder_layers - first), false);
    }
    for (int64_t d = 0; d < mtp_layers; ++d) add(decoder_layers + d, 1, true);
  } else {
    for (int64_t l = 0; l < std::min(k, decoder_layers); ++l) add(l, 1, false);
    if (mtp_layers > 0) {
      plan.warnings.push_back("recompute method \"block\" does not recompute MTP layers; the " +
                              std::to_string(mtp_layers) + " MTP layer(s) keep their activations");
    }
  }
  return plan;
}

namespace {

std::string LayerLabel(int64_t layer, int64_t decoder_layers) {
  return layer < decoder_layers ? std::to_string(layer)
                                : "mtp" + std::to_string(layer - decoder_layers);
}

}  // namespace

std::string FormatSegment(const LayerSegment& segment, int64_t decoder_layers) {
  std::string out = "[" + LayerLabel(segment.first_layer, decoder_layers);
  if (segment.num_layers > 1) out += "-" + LayerLabel(segment.last_layer(), decoder_layers);
  return out + "]";
}

std::string FormatSegments(const RecomputePlan& plan, int64_t decoder_layers) {
  if (plan.segments.empty()) return "none";
  std::string out;
  for (const LayerSegment& s : plan.segments) {
    out += (out.empty() ? "" : " ") + FormatSegment(s, decoder_layers);
  }
  return out;
}

LayerSegment InModelNumbering(const LayerSegment& segment, const PipelineStage& stage,
                              int64_t model_layers) {
  LayerSegment global = segment;
  global.first_layer = stage.ModelLayer(segment.first_layer, model_layers);
  return global;
}

std::string FormatChunkSegments(const RecomputePlan& plan, const PipelineStage& stage,
                                int64_t model_layers) {
  if (plan.segments.empty()) return "none";
  std::string out;
  for (const LayerSegment& s : plan.segments) {
    out += (out.empty() ? "" : " ") +
           FormatSegment(InModelNumbering(s, stage, model_layers), model_layers);
  }
  return out;
}

}  // namespace bitparity

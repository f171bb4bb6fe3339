#include "overlap_impl/combined_step_plan.h"

#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>
#include <utility>

#include "core/enum_names.h"

namespace bitparity {

namespace {

constexpr EnumName<NodeKind> kNodeNames[] = {{NodeKind::kPreProcess, "pre_process"},
                                             {NodeKind::kAttn, "attn"},
                                             {NodeKind::kDispatch, "moe_dispatch"},
                                             {NodeKind::kMlp, "mlp"},
                                             {NodeKind::kCombine, "moe_combine"},
                                             {NodeKind::kCombineEpilogue, "moe_combine_epilogue"},
                                             {NodeKind::kMtpPostProcess, "mtp_post_process"},
                                             {NodeKind::kPostProcess, "post_process"},
                                             {NodeKind::kSegment, "segment"},
                                             {NodeKind::kChunk, "chunk"}};
constexpr EnumName<Phase> kPhaseNames[] = {
    {Phase::kForward, "forward"},        {Phase::kBackward, "backward"},
    {Phase::kCapture, "capture"},        {Phase::kReplay, "replay"},
    {Phase::kReplayDone, "replay_done"}, {Phase::kRelease, "release"},
    {Phase::kFlushGrads, "flush_grads"}, {Phase::kReleaseActivations, "release_activations"}};
constexpr EnumName<Stream> kStreamNames[] = {
    {Stream::kCompute, "compute"}, {Stream::kComm, "comm"}, {Stream::kNone, "-"}};

}  // namespace

const char* ToString(NodeKind kind) { return NameIn(kNodeNames, kind); }
const char* ToString(Phase phase) { return NameIn(kPhaseNames, phase); }
const char* ToString(Stream stream) { return NameIn(kStreamNames, stream); }

namespace {

class PlanBuilder {
 public:
  explicit PlanBuilder(CombinedStepPlan* plan) : plan_(*plan) {}

  void CombinedStep(int64_t f, int64_t b) {
    const bool fwd = f >= 0, bwd = b >= 0;
    if (fwd) Add(NodeKind::kPreProcess, Phase::kForward, f);
    if (bwd) Add(NodeKind::kPostProcess, Phase::kBackward, b);
    const int64_t layers = plan_.layers();
    for (int64_t i = 0; i < layers; ++i) LayerPair(fwd ? f : -1, i, bwd ? b : -1, layers - 1 - i);
    if (fwd) {
      Epilogue();
      Add(NodeKind::kPostProcess, Phase::kForward, f);
    }
    if (bwd) {
      Add(NodeKind::kPreProcess, Phase::kBackward, b);
      Add(NodeKind::kChunk, Phase::kFlushGrads, b, -1, -1, Stream::kNone);
    }
    if (fwd && !plan_.recompute.segments.empty()) {
      Add(NodeKind::kChunk, Phase::kReleaseActivations, f, -1, -1, Stream::kNone);
    }
  }

 private:
  const LayerSegment* SegmentOf(int64_t layer, int64_t* index) const {
    *index = plan_.recompute.segment_of_layer[layer];
    return *index < 0 ? nullptr : &plan_.recompute.segments[*index];
  }

  void LayerPair(int64_t f, int64_t fl, int64_t b, int64_t bl) {
    const bool fwd = f >= 0, bwd = b >= 0;
    int64_t fs = -1, bs = -1;
    const LayerSegment* f_segment = fwd ? SegmentOf(fl, &fs) : nullptr;
    const LayerSegment* b_segment = bwd ? SegmentOf(bl, &bs) : nullptr;
    const bool f_moe = fwd && plan_.layer_is_moe[fl];
    const bool b_moe = bwd && plan_.layer_is_moe[bl];
    if (b_segment && b_segment->last_layer() == bl) Replay(b, bs);
    if (bwd && plan_.is_mtp(bl)) Add(NodeKind::kMtpPostProcess, Phase::kBackward, b, bl);
    if (bwd)
      Add(NodeKind::kCombine, Phase::kBackward, b, bl, -1,
          b_moe ? Stream::kComm : Stream::kCompute);
    if (fwd) Epilogue();  // the previous layer's output, for the capture or attn
    if (f_segment && f_segment->first_layer == fl) {
      Add(NodeKind::kSegment, Phase::kCapture, f, fl, fs, Stream::kNone);
    }
    if (fwd) Add(NodeKind::kAttn, Phase::kForward, f, fl);
    // Megatron issues mlp backward, then dispatch forward, and the two streams overlap them. On
    // CPU issuing compute blocks, so the all-to-all is issued first to run under the compute.
    // A dense layer's moe_dispatch is a null node (Megatron's NoopScheduleNode): it moves
    // nothing, and the plan says so with no stream.
    if (fwd) Add(NodeKind::kDispatch, Phase::kForward, f, fl, -1, CommStream(f_moe));
    if (bwd) Add(NodeKind::kMlp, Phase::kBackward, b, bl);
    if (bwd) Add(NodeKind::kDispatch, Phase::kBackward, b, bl, -1, CommStream(b_moe));
    if (fwd) Add(NodeKind::kMlp, Phase::kForward, f, fl);
    if (fwd) {
      Add(NodeKind::kCombine, Phase::kForward, f, fl, -1, f_moe ? Stream::kComm : Stream::kCompute);
      pending_epilogue_ = {f, fl};
    }
    if (bwd) Add(NodeKind::kAttn, Phase::kBackward, b, bl);
    if (fwd && plan_.is_mtp(fl)) {
      Epilogue();
      Add(NodeKind::kMtpPostProcess, Phase::kForward, f, fl);
    }
    if (b_segment && b_segment->first_layer == bl) {
      Add(NodeKind::kSegment, Phase::kRelease, b, bl, bs, Stream::kNone);
    }
  }

  // The segment's forward again, with grad, as the first action of its tail layer's backward;
  // nothing of the other microbatch runs meanwhile, so its all-to-alls are exposed.
  void Replay(int64_t b, int64_t segment) {
    const LayerSegment& s = plan_.recompute.segments[segment];
    Add(NodeKind::kSegment, Phase::kReplay, b, s.last_layer(), segment, Stream::kNone);
    for (int64_t l = s.first_layer; l <= s.last_layer(); ++l) {
      const bool moe = plan_.layer_is_moe[l];
      Add(NodeKind::kAttn, Phase::kReplay, b, l, segment);
      Add(NodeKind::kDispatch, Phase::kReplay, b, l, segment, CommStream(moe));
      Add(NodeKind::kMlp, Phase::kReplay, b, l, segment);
      Add(NodeKind::kCombine, Phase::kReplay, b, l, segment,
          moe ? Stream::kComm : Stream::kCompute);
      Add(NodeKind::kCombineEpilogue, Phase::kReplay, b, l, segment);
      if (plan_.is_mtp(l)) Add(NodeKind::kMtpPostProcess, Phase::kReplay, b, l, segment);
    }
    Add(NodeKind::kSegment, Phase::kReplayDone, b, s.last_layer(), segment, Stream::kNone);
  }

  static Stream CommStream(bool moe) { return moe ? Stream::kComm : Stream::kNone; }

  // The epilogue of the forward microbatch's last combine, right before the first operation
  // that needs the layer's output: its all-to-all stays in flight as long as it can.
  void Epilogue() {
    if (pending_epilogue_.first < 0) return;
    Add(NodeKind::kCombineEpilogue, Phase::kForward, pending_epilogue_.first,
        pending_epilogue_.second);
    pending_epilogue_ = {-1, -1};
  }

  void Add(NodeKind node, Phase phase, int64_t microbatch, int64_t layer = -1, int64_t segment = -1,
           Stream stream = Stream::kCompute) {
    plan_.ops.push_back({node, phase, microbatch, layer, segment, stream});
  }

  CombinedStepPlan& plan_;
  std::pair<int64_t, int64_t> pending_epilogue_{-1, -1};  // (microbatch, layer)
};

}  // namespace

CombinedStepPlan BuildCombinedStepPlan(const ModelConfig& model, int64_t microbatches,
                                       const RecomputeConfig& recompute) {
  CombinedStepPlan plan;
  plan.decoder_layers = model.layers;
  plan.mtp_layers = model.mtp_layers;
  plan.microbatches = microbatches;
  for (int64_t l = 0; l < model.layers; ++l) plan.layer_is_moe.push_back(model.layer_is_moe(l));
  for (int64_t d = 0; d < model.mtp_layers; ++d) plan.layer_is_moe.push_back(model.mtp_is_moe());
  plan.recompute = BuildRecomputePlan(recompute, model.layers, model.mtp_layers);
  PlanBuilder builder(&plan);
  builder.CombinedStep(0, -1);
  for (int64_t k = 1; k < microbatches; ++k) builder.CombinedStep(k, k - 1);
  builder.CombinedStep(-1, microbatches - 1);
  return plan;
}

namespace {

std::string LayerName(const CombinedStepPlan& plan, int64_t layer) {
  if (layer < 0) return "-";
  if (plan.is_mtp(layer)) return "mtp" + std::to_string(layer - plan.decoder_layers);
  return std::to_string(layer);
}

}  // namespace

std::string FormatPlan(const CombinedStepPlan& plan) {
  std::ostringstream out;
  out << "layers: " << plan.decoder_layers << " decoder";
  if (plan.mtp_layers) out << " + " << plan.mtp_layers << " MTP";
  out << "; microbatches: " << plan.microbatches << "\n";
  out << "recompute segments:";
  if (plan.recompute.segments.empty()) out << " none";
  for (size_t i = 0; i < plan.recompute.segments.size(); ++i) {
    out << " " << i << "=" << FormatSegment(plan.recompute.segments[i], plan.decoder_layers);
  }
  out << "\n";
  for (const std::string& w : plan.recompute.warnings) out << "warning: " << w << "\n";
  out << "operations: " << plan.ops.size() << "\n";
  char line[160];
  std::snprintf(line, sizeof(line), "%5s  %3s  %-5s  %-20s  %-19s  %-7s\n", "#", "mb", "layer",
                "node", "phase", "stream");
  out << line;
  for (size_t i = 0; i < plan.ops.size(); ++i) {
    const NodeOp& op = plan.ops[i];
    std::string node = ToString(op.node);
    if (op.node == NodeKind::kSegment) node += "[" + std::to_string(op.segment) + "]";
    std::snprintf(line, sizeof(line), "%5zu  %3lld  %-5s  %-20s  %-19s  %-7s\n", i,
                  static_cast<long long>(op.microbatch), LayerName(plan, op.layer).c_str(),
                  node.c_str(), ToString(op.phase), ToString(op.stream));
    out << line;
  }
  return out.str();
}

std::string PlanToJson(const CombinedStepPlan& plan) {
  nlohmann::json j;
  j["decoder_layers"] = plan.decoder_layers;
  j["mtp_layers"] = plan.mtp_layers;
  j["microbatches"] = plan.microbatches;
  j["segments"] = nlohmann::json::array();
  for (const LayerSegment& s : plan.recompute.segments) {
    j["segments"].push_back({{"first_layer", s.first_layer},
                             {"last_layer", s.last_layer()},
                             {"name", FormatSegment(s, plan.decoder_layers)}});
  }
  j["warnings"] = plan.recompute.warnings;
  j["ops"] = nlohmann::json::array();
  for (const NodeOp& op : plan.ops) {
    nlohmann::json o = {{"node", ToString(op.node)},
                        {"phase", ToString(op.phase)},
                        {"microbatch", op.microbatch},
                        {"stream", ToString(op.stream)}};
    if (op.layer >= 0) o["layer"] = op.layer;
    if (op.segment >= 0) o["segment"] = op.segment;
    j["ops"].push_back(o);
  }
  return j.dump(2);
}

}  // namespace bitparity

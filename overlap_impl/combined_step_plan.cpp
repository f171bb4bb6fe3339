#include "overlap_impl/combined_step_plan.h"

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>
#include <utility>

#include "core/enum_names.h"

namespace bitparity {

namespace {

class PlanBuilder {
 public:
  explicit PlanBuilder(CombinedStepPlan* plan) : plan_(*plan) {}

  // One combined step: the forward of pass `f` merged with the backward of pass `b` (either may
  // be absent); the receives of `next` (the following step, if any) are posted with the sends,
  // as Megatron's post_forward / post_backward hooks send and post the next receive together.
  void CombinedStep(const ChunkPass& f, const ChunkPass& b, const PipelineStep* next) {
    const ChunkPlan* forward = f.valid() ? &plan_.chunk(f.chunk) : nullptr;
    const ChunkPlan* backward = b.valid() ? &plan_.chunk(b.chunk) : nullptr;
    if (forward && forward->pre_process()) Add(NodeKind::kPreProcess, Phase::kForward, f);
    if (backward && backward->post_process()) Add(NodeKind::kPostProcess, Phase::kBackward, b);
    const int64_t forward_layers = forward ? forward->layers() : 0;
    const int64_t backward_layers = backward ? backward->layers() : 0;
    const int64_t paired = std::min(forward_layers, backward_layers);
    for (int64_t i = 0; i < paired; ++i) LayerPair(f, i, b, backward_layers - 1 - i);
    // Megatron's remaining backward-only layers, then the remaining forward-only ones.
    for (int64_t i = paired; i < backward_layers; ++i) {
      LayerPair({}, -1, b, backward_layers - 1 - i);
    }
    for (int64_t i = paired; i < forward_layers; ++i) LayerPair(f, i, {}, -1);
    if (forward) {
      Epilogue();
      if (forward->sends()) Add(NodeKind::kP2pSend, Phase::kForward, f, -1, -1, Stream::kComm);
    }
    if (next) PostReceive(Phase::kForward, next->forward);
    if (backward && backward->receives()) {
      Add(NodeKind::kP2pSend, Phase::kBackward, b, -1, -1, Stream::kComm);
    }
    if (next) PostReceive(Phase::kBackward, next->backward);
    if (pending_attn_wgrad_.second >= 0) {
      Add(NodeKind::kAttn, Phase::kWgrad, pending_attn_wgrad_.first, pending_attn_wgrad_.second);
      pending_attn_wgrad_ = {ChunkPass{}, -1};
    }
    if (forward && forward->post_process()) Add(NodeKind::kPostProcess, Phase::kForward, f);
    if (backward) {
      if (backward->pre_process()) Add(NodeKind::kPreProcess, Phase::kBackward, b);
      Add(NodeKind::kChunk, Phase::kFlushGrads, b, -1, -1, Stream::kNone);
    }
    if (forward && !forward->recompute.segments.empty()) {
      Add(NodeKind::kChunk, Phase::kReleaseActivations, f, -1, -1, Stream::kNone);
    }
  }

  // The receive a pass needs, if any: the activation for its forward (a stage that is not the
  // first), the output's gradient for its backward (a stage that is not the loss stage).
  void PostReceive(Phase phase, const ChunkPass& pass) {
    if (!pass.valid()) return;
    const ChunkPlan& chunk = plan_.chunk(pass.chunk);
    if (phase == Phase::kForward ? chunk.receives() : chunk.sends()) {
      Add(NodeKind::kP2pRecv, phase, pass, -1, -1, Stream::kComm);
    }
  }

 private:
  const LayerSegment* SegmentOf(const ChunkPlan& chunk, int64_t layer, int64_t* index) const {
    *index = chunk.recompute.segment_of_layer[layer];
    return *index < 0 ? nullptr : &chunk.recompute.segments[*index];
  }

  void LayerPair(const ChunkPass& f, int64_t fl, const ChunkPass& b, int64_t bl) {
    const bool fwd = f.valid(), bwd = b.valid();
    const ChunkPlan* forward = fwd ? &plan_.chunk(f.chunk) : nullptr;
    const ChunkPlan* backward = bwd ? &plan_.chunk(b.chunk) : nullptr;
    int64_t fs = -1, bs = -1;
    const LayerSegment* f_segment = fwd ? SegmentOf(*forward, fl, &fs) : nullptr;
    const LayerSegment* b_segment = bwd ? SegmentOf(*backward, bl, &bs) : nullptr;
    const bool f_moe = fwd && forward->layer_is_moe[fl];
    const bool b_moe = bwd && backward->layer_is_moe[bl];
    if (b_segment && b_segment->last_layer() == bl) Replay(b, bs);
    if (bwd && backward->is_mtp(bl)) Add(NodeKind::kMtpPostProcess, Phase::kBackward, b, bl);
    if (bwd && plan_.mhc) Add(NodeKind::kMhcPost, Phase::kBackward, b, bl);
    if (bwd) {
      Add(NodeKind::kCombine, Phase::kBackward, b, bl, -1,
          b_moe ? Stream::kComm : Stream::kCompute);
    }
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
    if (bwd && plan_.delay_wgrad) Add(NodeKind::kMlp, Phase::kWgrad, b, bl);
    if (fwd) Add(NodeKind::kMlp, Phase::kForward, f, fl);
    if (fwd) {
      Add(NodeKind::kCombine, Phase::kForward, f, fl, -1, f_moe ? Stream::kComm : Stream::kCompute);
      pending_epilogue_ = {f, fl};
    }
    if (bwd) Add(NodeKind::kAttn, Phase::kBackward, b, bl);
    if (fwd && forward->is_mtp(fl)) {
      Epilogue();
      Add(NodeKind::kMtpPostProcess, Phase::kForward, f, fl);
    }
    if (bwd && plan_.delay_wgrad) {
      if (bl == 0) {
        pending_attn_wgrad_ = {b, bl};  // the last backward layer's: after the step's sends
      } else {
        Add(NodeKind::kAttn, Phase::kWgrad, b, bl);
      }
    }
    if (b_segment && b_segment->first_layer == bl) {
      Add(NodeKind::kSegment, Phase::kRelease, b, bl, bs, Stream::kNone);
    }
  }

  // The segment's forward again, with grad, as the first action of its tail layer's backward;
  // nothing of the other microbatch runs meanwhile, so its all-to-alls are exposed.
  void Replay(const ChunkPass& b, int64_t segment) {
    const ChunkPlan& chunk = plan_.chunk(b.chunk);
    const LayerSegment& s = chunk.recompute.segments[segment];
    Add(NodeKind::kSegment, Phase::kReplay, b, s.last_layer(), segment, Stream::kNone);
    for (int64_t l = s.first_layer; l <= s.last_layer(); ++l) {
      const bool moe = chunk.layer_is_moe[l];
      Add(NodeKind::kAttn, Phase::kReplay, b, l, segment);
      Add(NodeKind::kDispatch, Phase::kReplay, b, l, segment, CommStream(moe));
      Add(NodeKind::kMlp, Phase::kReplay, b, l, segment);
      Add(NodeKind::kCombine, Phase::kReplay, b, l, segment,
          moe ? Stream::kComm : Stream::kCompute);
      Add(NodeKind::kCombineEpilogue, Phase::kReplay, b, l, segment);
      if (plan_.mhc) Add(NodeKind::kMhcPost, Phase::kReplay, b, l, segment);
      if (chunk.is_mtp(l)) Add(NodeKind::kMtpPostProcess, Phase::kReplay, b, l, segment);
    }
    Add(NodeKind::kSegment, Phase::kReplayDone, b, s.last_layer(), segment, Stream::kNone);
  }

  static Stream CommStream(bool moe) { return moe ? Stream::kComm : Stream::kNone; }

  // The epilogue of the forward pass's last combine, right before the first operation that needs
  // the layer's output: its all-to-all stays in flight as long as it can.
  void Epilogue() {
    if (pending_epilogue_.second < 0) return;
    Add(NodeKind::kCombineEpilogue, Phase::kForward, pending_epilogue_.first,
        pending_epilogue_.second);
    if (plan_.mhc) {
      Add(NodeKind::kMhcPost, Phase::kForward, pending_epilogue_.first, pending_epilogue_.second);
    }
    pending_epilogue_ = {ChunkPass{}, -1};
  }

  void Add(NodeKind node, Phase phase, const ChunkPass& pass, int64_t layer = -1,
           int64_t segment = -1, Stream stream = Stream::kCompute) {
    NodeOp op;
    op.node = node;
    op.phase = phase;
    op.microbatch = pass.microbatch;
    op.chunk = pass.chunk;
    op.layer = layer;
    op.segment = segment;
    op.stream = stream;
    plan_.ops.push_back(op);
  }

  CombinedStepPlan& plan_;
  std::pair<ChunkPass, int64_t> pending_epilogue_{ChunkPass{}, -1};    // (pass, layer)
  std::pair<ChunkPass, int64_t> pending_attn_wgrad_{ChunkPass{}, -1};  // (pass, layer)
};

}  // namespace

int64_t ChunkPlan::ModelLayer(int64_t layer) const {
  return stage.ModelLayer(layer, model_decoder_layers);
}

std::vector<ChunkPlan> BuildChunkPlans(const ModelConfig& model, const PipelineLayout& pipeline,
                                       int64_t pp_rank, const RecomputeConfig& recompute) {
  std::vector<ChunkPlan> chunks;
  for (int64_t c = 0; c < pipeline.vpp; ++c) {
    ChunkPlan chunk;
    chunk.stage = pipeline.stage(pp_rank, c);
    chunk.model_decoder_layers = model.layers;
    for (int64_t l = 0; l < chunk.stage.layers; ++l) {
      chunk.layer_is_moe.push_back(model.layer_is_moe(chunk.stage.first_layer + l));
    }
    for (int64_t d = 0; d < chunk.stage.mtp_layers; ++d) {
      chunk.layer_is_moe.push_back(model.mtp_is_moe());
    }
    chunk.recompute = BuildRecomputePlan(recompute, chunk.stage.layers, chunk.stage.mtp_layers);
    chunk.input_parts = pipeline.ActivationParts(chunk.stage.index);
    chunk.output_parts = chunk.input_parts + chunk.stage.mtp_layers;
    const int64_t residual = model.residual_width();
    chunk.input_width = pipeline.ActivationWidth(chunk.stage.index, model.hidden, residual);
    chunk.output_width = pipeline.ActivationWidth(chunk.stage.index + 1, model.hidden, residual);
    const int64_t previous = pipeline.previous(chunk.stage.index);
    const int64_t next = pipeline.next(chunk.stage.index);
    chunk.previous_rank =
        previous < 0 ? -1 : pipeline.stages[static_cast<size_t>(previous)].pp_rank;
    chunk.next_rank = next < 0 ? -1 : pipeline.stages[static_cast<size_t>(next)].pp_rank;
    chunks.push_back(std::move(chunk));
  }
  return chunks;
}

std::string ChunkPlan::LayerName(int64_t layer) const {
  if (layer < 0) return "-";
  const int64_t model_layer = ModelLayer(layer);
  return is_mtp(layer) ? "mtp" + std::to_string(model_layer - model_decoder_layers)
                       : std::to_string(model_layer);
}

CombinedStepPlan BuildCombinedStepPlan(const ModelConfig& model, const PipelineLayout& pipeline,
                                       int64_t pp_rank, int64_t microbatches,
                                       const RecomputeConfig& recompute, bool delay_wgrad) {
  CombinedStepPlan plan;
  plan.delay_wgrad = delay_wgrad;
  plan.microbatches = microbatches;
  plan.pp = pipeline.pp;
  plan.vpp = pipeline.vpp;
  plan.pp_rank = pp_rank;
  plan.mhc = model.mhc();
  plan.chunks = BuildChunkPlans(model, pipeline, pp_rank, recompute);
  plan.steps = PipelineSchedule(
      PipelineScheduleConfig::Of(pipeline, microbatches, /*ep_overlap=*/true), pp_rank);
  PlanBuilder builder(&plan);
  if (!plan.steps.empty()) {
    builder.PostReceive(Phase::kForward, plan.steps.front().forward);
    builder.PostReceive(Phase::kBackward, plan.steps.front().backward);
  }
  for (size_t i = 0; i < plan.steps.size(); ++i) {
    const PipelineStep* next = i + 1 < plan.steps.size() ? &plan.steps[i + 1] : nullptr;
    builder.CombinedStep(plan.steps[i].forward, plan.steps[i].backward, next);
  }
  return plan;
}

CombinedStepPlan BuildCombinedStepPlan(const ModelConfig& model, int64_t microbatches,
                                       const RecomputeConfig& recompute, bool delay_wgrad) {
  return BuildCombinedStepPlan(model, EvenPipelineLayout(1, 1, model.layers, model.mtp_layers), 0,
                               microbatches, recompute, delay_wgrad);
}

namespace {

// The stage a transfer of `op` goes to or comes from: forward transfers come from the previous
// stage and go to the next, gradients the other way.
int64_t PeerStage(const ChunkPlan& chunk, const NodeOp& op) {
  const bool from_previous = (op.node == NodeKind::kP2pRecv) == (op.phase == Phase::kForward);
  return chunk.stage.index + (from_previous ? -1 : 1);
}

bool IsTransfer(const NodeOp& op) {
  return op.node == NodeKind::kP2pRecv || op.node == NodeKind::kP2pSend;
}

}  // namespace

CombinedStepPlan PlanForArm(const ModelConfig& model, const PipelineLayout& pipeline,
                            int64_t pp_rank, int64_t microbatches, const ArmConfig& arm) {
  if (pipeline.stages.empty()) {
    return BuildCombinedStepPlan(model, microbatches, arm.recompute, arm.delay_wgrad);
  }
  return BuildCombinedStepPlan(model, pipeline, pp_rank, microbatches, arm.recompute,
                               arm.delay_wgrad);
}

std::string FormatPlan(const CombinedStepPlan& plan) {
  std::ostringstream out;
  if (plan.pipelined()) {
    out << "pipeline rank " << plan.pp_rank << " of " << plan.pp << ", " << plan.vpp
        << " model chunks; microbatches: " << plan.microbatches << "\n";
    out << "combined steps: " << FormatPipelineSchedule(plan.steps) << "\n";
  } else {
    const ChunkPlan& c = plan.chunk(0);
    out << "layers: " << c.decoder_layers() << " decoder";
    if (c.mtp_layers()) out << " + " << c.mtp_layers() << " MTP";
    out << "; microbatches: " << plan.microbatches << "\n";
  }
  for (const ChunkPlan& c : plan.chunks) {
    if (plan.pipelined()) {
      out << "chunk " << c.stage.chunk << " (stage " << c.stage.index << ": " << c.stage.Contents()
          << ") ";
    }
    out << "recompute segments:";
    if (c.recompute.segments.empty()) out << " none";
    for (size_t i = 0; i < c.recompute.segments.size(); ++i) {
      out << " " << i << "="
          << FormatSegment(
                 InModelNumbering(c.recompute.segments[i], c.stage, c.model_decoder_layers),
                 c.model_decoder_layers);
    }
    out << "\n";
    for (const std::string& w : c.recompute.warnings) out << "warning: " << w << "\n";
  }
  out << "operations: " << plan.ops.size() << "\n";
  char line[200];
  std::snprintf(line, sizeof(line), "%5s  %5s  %3s  %-5s  %-20s  %-19s  %-7s  %s\n", "#", "chunk",
                "mb", "layer", "node", "phase", "stream", "peer");
  out << line;
  for (size_t i = 0; i < plan.ops.size(); ++i) {
    const NodeOp& op = plan.ops[i];
    const ChunkPlan& c = plan.chunk(op.chunk);
    std::string node = ToString(op.node);
    if (op.node == NodeKind::kSegment) node += "[" + std::to_string(op.segment) + "]";
    std::string peer;
    if (IsTransfer(op)) {
      const int64_t stage = PeerStage(c, op);
      const bool previous = stage < c.stage.index;
      peer = std::string(op.node == NodeKind::kP2pRecv ? "from" : "to") + " stage " +
             std::to_string(stage) + " (rank " +
             std::to_string(previous ? c.previous_rank : c.next_rank) + ")";
    }
    std::snprintf(line, sizeof(line), "%5zu  %5lld  %3lld  %-5s  %-20s  %-19s  %-7s  %s\n", i,
                  static_cast<long long>(op.chunk), static_cast<long long>(op.microbatch),
                  c.LayerName(op.layer).c_str(), node.c_str(), ToString(op.phase),
                  ToString(op.stream), peer.c_str());
    out << line;
  }
  return out.str();
}

std::string PlanToJson(const CombinedStepPlan& plan) {
  nlohmann::json j;
  j["pp"] = plan.pp;
  j["vpp"] = plan.vpp;
  j["pp_rank"] = plan.pp_rank;
  j["microbatches"] = plan.microbatches;
  j["steps"] = nlohmann::json::array();
  for (const PipelineStep& step : plan.steps) {
    nlohmann::json s = nlohmann::json::object();
    if (step.forward.valid()) {
      s["forward"] = {{"chunk", step.forward.chunk}, {"microbatch", step.forward.microbatch}};
    }
    if (step.backward.valid()) {
      s["backward"] = {{"chunk", step.backward.chunk}, {"microbatch", step.backward.microbatch}};
    }
    j["steps"].push_back(s);
  }
  j["chunks"] = nlohmann::json::array();
  for (const ChunkPlan& c : plan.chunks) {
    nlohmann::json chunk = {
        {"chunk", c.stage.chunk},         {"stage", c.stage.index},
        {"contents", c.stage.Contents()}, {"decoder_layers", c.decoder_layers()},
        {"mtp_layers", c.mtp_layers()},   {"warnings", c.recompute.warnings}};
    chunk["layers"] = nlohmann::json::array();
    for (int64_t l = 0; l < c.layers(); ++l) chunk["layers"].push_back(c.LayerName(l));
    chunk["segments"] = nlohmann::json::array();
    for (const LayerSegment& s : c.recompute.segments) {
      chunk["segments"].push_back(
          {{"first_layer", s.first_layer},
           {"last_layer", s.last_layer()},
           {"name", FormatSegment(InModelNumbering(s, c.stage, c.model_decoder_layers),
                                  c.model_decoder_layers)}});
    }
    j["chunks"].push_back(chunk);
  }
  j["ops"] = nlohmann::json::array();
  for (const NodeOp& op : plan.ops) {
    nlohmann::json o = {{"node", ToString(op.node)},
                        {"phase", ToString(op.phase)},
                        {"chunk", op.chunk},
                        {"microbatch", op.microbatch},
                        {"stream", ToString(op.stream)}};
    if (op.layer >= 0) {
      o["layer"] = op.layer;  // within the chunk
      o["layer_name"] = plan.chunk(op.chunk).LayerName(op.layer);
    }
    if (op.segment >= 0) o["segment"] = op.segment;
    if (IsTransfer(op)) o["peer_stage"] = PeerStage(plan.chunk(op.chunk), op);
    j["ops"].push_back(o);
  }
  return j.dump(2);
}

}  // namespace bitparity

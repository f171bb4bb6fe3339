#include "runtime/memory_model.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <algorithm>
#include <functional>
#include <optional>
#include <vector>

#include "config/recompute_plan.h"
#include "core/memory.h"
#include "model/ops.h"
#include "overlap_impl/combined_step_plan.h"
#include "schedule/pipeline_schedule.h"

namespace bitparity {
namespace {

// Tracks the live bytes of a walk over a schedule and the largest total met.
class Walk {
 public:
  void Add(int64_t bytes, const std::string& phase) {
    live_ += bytes;
    Check(0, phase);
  }
  void Check(int64_t extra, const std::string& phase) {
    if (live_ + extra > peak_) {
      peak_ = live_ + extra;
      phase_ = phase;
    }
  }
  int64_t peak() const { return peak_; }
  int64_t live() const { return live_; }
  const std::string& phase() const { return phase_; }

 private:
  int64_t live_ = 0;
  int64_t peak_ = 0;
  std::string phase_;
};

// "attn forward mb3 chunk 1 layer 5": where the walk met a total.
std::string Label(const char* what, int64_t microbatch, const ChunkPlan& chunk, int64_t layer,
                  bool pipelined) {
  std::string out = std::string(what) + " mb" + std::to_string(microbatch);
  if (pipelined) out += " chunk " + std::to_string(chunk.stage.chunk);
  if (layer >= 0) out += " layer " + chunk.LayerName(layer);
  return out;
}

// The walk's view of one model chunk of the rank: its layers' sizes and segments.
class ChunkSizes {
 public:
  ChunkSizes(const MemoryProbe& probe, const ChunkPlan& chunk, bool pipelined)
      : probe_(probe), chunk_(chunk), pipelined_(pipelined) {}

  const LayerMemory& layer(int64_t l) const {
    return probe_.layers[static_cast<size_t>(chunk_.ModelLayer(l))];
  }
  bool recomputed(int64_t l) const { return chunk_.recompute.segment_of_layer[l] >= 0; }
  const LayerSegment& segment(int64_t l) const {
    return chunk_.recompute.segments[chunk_.recompute.segment_of_layer[l]];
  }
  bool tail(int64_t l) const { return recomputed(l) && segment(l).last_layer() == l; }
  bool head(int64_t l) const { return recomputed(l) && segment(l).first_layer == l; }
  int64_t layers() const { return chunk_.layers(); }
  // The activation received from the previous stage and the gradient received from the next.
  int64_t received() const {
    return chunk_.receives() ? Activation(chunk_.input_parts, chunk_.input_width) : 0;
  }
  int64_t received_gradient() const {
    return chunk_.sends() ? Activation(chunk_.output_parts, chunk_.output_width) : 0;
  }
  // An MTP chunk's output joins the main and MTP hidden states in one new tensor.
  int64_t stacked_output() const {
    return chunk_.mtp_layers() > 0 ? Activation(chunk_.output_parts, chunk_.output_width) : 0;
  }
  // `parts` activations of last dimension `width` (the residual's under mHC before the final
  // norm, hidden after it).
  int64_t Activation(int64_t parts, int64_t width) const {
    return probe_.input_bytes / probe_.input_width * width * parts;
  }
  // Every .grad the chunk's backward leaves until the flush.
  int64_t grad_bytes() const {
    int64_t g = (chunk_.pre_process() ? probe_.embedding_grad_bytes : 0) +
                (chunk_.post_process() ? probe_.post_grad_bytes : 0);
    for (int64_t l = 0; l < layers(); ++l) g += layer(l).grad_bytes;
    return g;
  }
  std::string Where(const char* what, int64_t microbatch, int64_t l = -1) const {
    return Label(what, microbatch, chunk_, l, pipelined_);
  }
  const ChunkPlan& plan() const { return chunk_; }

 private:
  const MemoryProbe& probe_;
  const ChunkPlan& chunk_;
  bool pipelined_;
};

// The reference arm's forward of one pass: every layer's graph kept, but the checkpointed
// segments' (their outputs only).
void ReferenceForward(const MemoryProbe& p, const ChunkSizes& c, int64_t m, Walk* w) {
  w->Add(c.received(), c.Where("receive", m));
  if (c.plan().pre_process()) w->Add(p.embedding_retained, c.Where("embedding forward", m));
  for (int64_t l = 0; l < c.layers(); ++l) {
    const LayerMemory& a = c.layer(l);
    if (c.recomputed(l)) {
      w->Check(a.forward_transient_no_grad, c.Where("no-grad forward", m, l));
      if (c.tail(l)) w->Add(p.input_bytes, c.Where("segment output", m, l));
    } else {
      w->Check(a.retained + a.forward_transient, c.Where("forward", m, l));
      w->Add(a.retained, c.Where("forward", m, l));
    }
  }
  if (c.plan().post_process()) {
    w->Check(p.post_retained + p.post_forward_transient, c.Where("post-process forward", m));
    w->Add(p.post_retained, c.Where("post-process forward", m));
  } else {
    w->Add(c.stacked_output(), c.Where("stacked output", m));
  }
}

// Its backward: segments replayed from their outputs down, gradients kept until the flush.
void ReferenceBackward(const MemoryProbe& p, const ChunkSizes& c, int64_t m, Walk* w) {
  if (c.plan().post_process()) {
    w->Add(p.post_grad_bytes, c.Where("post-process backward", m));
    w->Check(p.post_backward_transient, c.Where("post-process backward", m));
    w->Add(-p.post_retained, c.Where("post-process backward", m));
  } else {
    w->Add(c.received_gradient(), c.Where("receive gradient", m));
  }
  for (int64_t l = c.layers() - 1; l >= 0; --l) {
    const LayerMemory& a = c.layer(l);
    if (c.tail(l)) {
      for (int64_t j = c.segment(l).first_layer; j <= l; ++j) {
        w->Check(c.layer(j).retained + c.layer(j).forward_transient, c.Where("replay", m, j));
        w->Add(c.layer(j).retained, c.Where("replay", m, j));
      }
    }
    w->Check(a.grad_bytes + a.backward_transient, c.Where("backward", m, l));
    w->Add(a.grad_bytes - a.retained, c.Where("backward", m, l));
    if (c.head(l)) w->Add(-p.input_bytes, c.Where("backward", m, l));
  }
  // The input's gradient goes back to the previous stage (its send lets go of it at once).
  w->Check(c.received(), c.Where("send gradient", m));
  // The activation received, the gradient received and (a chunk that sends MTP hidden states on)
  // the stacked output go with the pass.
  const int64_t stacked = c.plan().post_process() ? 0 : c.stacked_output();
  w->Add(-c.received() - c.received_gradient() - stacked, c.Where("backward end", m));
  if (c.plan().pre_process()) {
    w->Add(p.embedding_grad_bytes - p.embedding_retained, c.Where("embedding backward", m));
  }
  w->Add(-c.grad_bytes(), c.Where("gradient flush", m));
}

// The reference arm: its 1F1B steps in order, each step's forward pass, then its backward pass.
void WalkReference(const MemoryProbe& p, const std::vector<ChunkPlan>& chunks,
                   const std::vector<PipelineStep>& steps, bool pipelined, Walk* w) {
  for (const PipelineStep& step : steps) {
    if (step.forward.valid()) {
      const ChunkSizes c(p, chunks[static_cast<size_t>(step.forward.chunk)], pipelined);
      ReferenceForward(p, c, step.forward.microbatch, w);
    }
    if (step.backward.valid()) {
      const ChunkSizes c(p, chunks[static_cast<size_t>(step.backward.chunk)], pipelined);
      ReferenceBackward(p, c, step.backward.microbatch, w);
    }
  }
}

// A replayed layer holds what its forward with grad keeps, from its attn node on.
void WalkReplay(const ChunkSizes& c, const NodeOp& op, Walk* w) {
  if (op.node != NodeKind::kAttn) return;
  const int64_t m = op.microbatch, l = op.layer;
  const int64_t kept = c.layer(l).retained + c.layer(l).node_boundary_bytes;
  w->Check(kept + c.layer(l).forward_transient, c.Where("segment replay", m, l));
  w->Add(kept, c.Where("segment replay", m, l));
}

void WalkPostProcess(const MemoryProbe& p, const ChunkSizes& c, bool fwd, int64_t m, Walk* w) {
  if (fwd) {
    w->Check(p.post_retained + p.post_forward_transient, c.Where("post_process forward", m));
    w->Add(p.post_retained, c.Where("post_process forward", m));
    return;
  }
  w->Add(p.post_grad_bytes, c.Where("post_process backward", m));
  w->Check(p.post_backward_transient, c.Where("post_process backward", m));
  w->Add(-p.post_retained - c.stacked_output(), c.Where("post_process backward", m));
  // The last layer's no-grad output fed the post-process and dies with it.
  if (c.layers() > 0 && c.tail(c.layers() - 1)) {
    w->Add(-p.input_bytes, c.Where("post_process backward", m));
  }
}

void WalkSend(const MemoryProbe& p, const ChunkSizes& c, bool fwd, int64_t m, Walk* w) {
  if (!fwd) {
    w->Check(c.received(), c.Where("send gradient", m));
    return;
  }
  // The output leaves with the step: a no-grad tail's output, an MTP chunk's stacked output, or
  // (a chunk without layers) the activation it received.
  int64_t leaving = c.stacked_output();
  if (c.layers() > 0 && c.tail(c.layers() - 1)) leaving += p.input_bytes;
  if (c.layers() == 0) leaving += c.received();
  w->Add(-leaving, c.Where("send", m));
}

// The backward of layer `l`'s attn node, where the walk lets the whole layer's graph go and its
// gradients come; with `delay_wgrad` the attn and mlp nodes' weight gradients come at their wgrad
// nodes instead, and until then what they hold stays.
void WalkAttn(const MemoryProbe& p, const ChunkSizes& c, bool fwd, int64_t m, int64_t l,
              bool delay_wgrad, Walk* w) {
  const LayerMemory& a = c.layer(l);
  if (fwd && c.recomputed(l)) {
    w->Check(a.forward_transient_no_grad, c.Where("no-grad attn forward", m, l));
    if (c.tail(l)) w->Add(p.input_bytes, c.Where("segment output", m, l));
  } else if (fwd) {
    const int64_t kept = a.retained + a.node_boundary_bytes;
    w->Check(kept + a.forward_transient, c.Where("attn forward", m, l));
    w->Add(kept, c.Where("attn forward", m, l));
  } else {
    const int64_t grads = delay_wgrad ? a.grad_bytes - a.attn_wgrad_grad_bytes -
                                            a.mlp_wgrad_grad_bytes + a.attn_wgrad_held
                                      : a.grad_bytes;
    w->Check(grads + a.backward_transient, c.Where("attn backward", m, l));
    w->Add(grads - a.retained - a.node_boundary_bytes, c.Where("attn backward", m, l));
    // An eager layer fed by a no-grad segment's output frees that output here.
    if (!c.recomputed(l) && l > 0 && c.tail(l - 1)) {
      w->Add(-p.input_bytes, c.Where("attn backward", m, l));
    }
  }
}

void WalkSegment(const MemoryProbe& p, const ChunkSizes& c, const NodeOp& op, Walk* w,
                 std::vector<ReplayLevel>* levels) {
  const LayerSegment& s = c.plan().recompute.segments[op.segment];
  if (op.phase == Phase::kReplayDone) {
    int64_t segment_bytes = 0;
    for (int64_t j = s.first_layer; j <= s.last_layer(); ++j) {
      segment_bytes += c.layer(j).retained + c.layer(j).node_boundary_bytes;
    }
    levels->push_back({{op.chunk, op.microbatch, op.segment}, w->live(), segment_bytes});
  }
  if (op.phase == Phase::kRelease && s.first_layer > 0 && c.tail(s.first_layer - 1)) {
    w->Add(-p.input_bytes, c.Where("segment release", op.microbatch, s.first_layer));
  }
}

// Delayed weight gradients (delay_wgrad): the mlp node's backward leaves what its pending
// gradients hold, which its wgrad node turns into .grad bytes; the attn node's wgrad does the same
// for what the attn backward left (WalkAttn).
void WalkMlp(const ChunkSizes& c, const NodeOp& op, bool delay_wgrad, Walk* w) {
  const LayerMemory& a = c.layer(op.layer);
  if (op.phase == Phase::kBackward && delay_wgrad) {
    w->Add(a.mlp_wgrad_held, c.Where("mlp backward", op.microbatch, op.layer));
  } else if (op.phase == Phase::kWgrad) {
    w->Add(a.mlp_wgrad_grad_bytes - a.mlp_wgrad_held,
           c.Where("mlp wgrad", op.microbatch, op.layer));
  }
}

// The pass ends: its gradients, the activation it received (unless a chunk without layers passed
// it on at once) and the gradient it received go.
void WalkGradientFlush(const ChunkSizes& c, int64_t m, Walk* w) {
  const int64_t received = c.layers() == 0 && !c.plan().post_process() ? 0 : c.received();
  w->Add(-c.grad_bytes() - received - c.received_gradient(), c.Where("gradient flush", m));
}

// The overlap arm: the plan's operations in order, each adding or releasing what its node keeps.
// Where a segment's replay is done, the walk's level goes to `levels`.
void WalkOverlap(const MemoryProbe& p, const CombinedStepPlan& plan, Walk* w,
                 std::vector<ReplayLevel>* levels) {
  std::vector<ChunkSizes> sizes;
  for (const ChunkPlan& chunk : plan.chunks) sizes.emplace_back(p, chunk, plan.pipelined());
  for (const NodeOp& op : plan.ops) {
    const ChunkSizes& c = sizes[static_cast<size_t>(op.chunk)];
    const int64_t m = op.microbatch, l = op.layer;
    const bool fwd = op.phase == Phase::kForward;
    if (op.phase == Phase::kReplay && op.node != NodeKind::kSegment) {
      WalkReplay(c, op, w);
      continue;
    }
    switch (op.node) {
      case NodeKind::kPreProcess:
        if (fwd) {
          w->Add(p.embedding_retained, c.Where("pre_process forward", m));
        } else {
          w->Add(p.embedding_grad_bytes - p.embedding_retained, c.Where("pre_process backward", m));
        }
        break;
      case NodeKind::kPostProcess:
        WalkPostProcess(p, c, fwd, m, w);
        break;
      case NodeKind::kP2pRecv:
        // The receive's buffer exists from when it is posted.
        w->Add(fwd ? c.received() : c.received_gradient(),
               c.Where(fwd ? "receive posted" : "gradient receive posted", m));
        break;
      case NodeKind::kP2pSend:
        WalkSend(p, c, fwd, m, w);
        break;
      case NodeKind::kMtpPostProcess:
        if (fwd && l == c.layers() - 1) w->Add(c.stacked_output(), c.Where("stacked output", m, l));
        break;
      case NodeKind::kAttn:
        if (op.phase == Phase::kWgrad) {
          const LayerMemory& a = c.layer(l);
          w->Add(a.attn_wgrad_grad_bytes - a.attn_wgrad_held, c.Where("attn wgrad", m, l));
        } else {
          WalkAttn(p, c, fwd, m, l, plan.delay_wgrad, w);
        }
        break;
      case NodeKind::kMlp:
        WalkMlp(c, op, plan.delay_wgrad, w);
        break;
      case NodeKind::kSegment:
        WalkSegment(p, c, op, w, levels);
        break;
      case NodeKind::kChunk:
        if (op.phase == Phase::kFlushGrads) WalkGradientFlush(c, m, w);
        break;
      case NodeKind::kDispatch:  // their bytes are in the attn node's retained and boundary figures
      case NodeKind::kCombine:
      case NodeKind::kCombineEpilogue:
      case NodeKind::kMhcPost:
        break;
    }
  }
}

}  // namespace

MemoryPrediction PredictPeak(const MemoryProbe& probe, const ArmConfig& arm,
                             const ModelConfig& model, const PipelineLayout& pipeline,
                             int64_t pp_rank, int64_t microbatches, int64_t static_bytes) {
  Walk w;
  MemoryPrediction prediction;
  if (arm.engine == EngineKind::kReference) {
    WalkReference(probe, BuildChunkPlans(model, pipeline, pp_rank, arm.recompute),
                  PipelineSchedule(PipelineScheduleConfig::Of(pipeline, microbatches), pp_rank),
                  pipeline.pp > 1, &w);
  } else {
    WalkOverlap(probe, PlanForArm(model, pipeline, pp_rank, microbatches, arm), &w,
                &prediction.replay_levels);
  }
  w.Check(probe.reduction_transient, "gradient reduction");
  prediction.static_bytes = static_bytes;
  prediction.peak_bytes = static_bytes + w.peak();
  prediction.peak_phase = w.phase();
  prediction.unreleased_bytes = w.live();
  return prediction;
}

}  // namespace bitparity

#include "runtime/memory_model.h"

#include <torch/torch.h>

#include <functional>
#include <optional>

#include "core/memory.h"
#include "core/recompute_plan.h"
#include "overlap_impl/combined_step_plan.h"

namespace bitparity {
namespace {

int64_t Live() { return MemoryTracker::current_bytes(); }

int64_t Bytes(const at::Tensor& t) {
  return t.defined() ? t.numel() * static_cast<int64_t>(t.element_size()) : 0;
}

// The bytes of every .grad now defined, which are then cleared.
int64_t TakeGradBytes(ParameterStore& store) {
  int64_t bytes = 0;
  for (Parameter& p : store.all()) {
    bytes += Bytes(p.weight.grad());
    p.weight.mutable_grad() = at::Tensor();
  }
  return bytes;
}

LayerMemory ProbeLayer(const std::function<at::Tensor(const at::Tensor&)>& forward,
                       const at::Tensor& input, ParameterStore& store) {
  LayerMemory m;
  at::Tensor x = input.detach().requires_grad_(true);
  {
    torch::NoGradGuard no_grad;
    const int64_t before = Live();
    MemoryTracker::ResetProbePeak();
    at::Tensor out = forward(x);
    m.forward_transient_no_grad = MemoryTracker::probe_peak_bytes() - before;
  }
  const int64_t before = Live();
  MemoryTracker::ResetProbePeak();
  at::Tensor out = forward(x);
  m.retained = Live() - before;
  m.forward_transient = MemoryTracker::probe_peak_bytes() - Live();
  const int64_t pre_backward = Live();
  MemoryTracker::ResetProbePeak();
  torch::autograd::backward({out}, {at::full_like(out, 1e-3)});
  const int64_t peak = MemoryTracker::probe_peak_bytes();
  m.grad_bytes = TakeGradBytes(store);
  m.backward_transient = std::max<int64_t>(0, peak - pre_backward - m.grad_bytes);
  return m;
}

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
  const std::string& phase() const { return phase_; }

 private:
  int64_t live_ = 0;
  int64_t peak_ = 0;
  std::string phase_;
};

std::string Where(const char* what, int64_t microbatch, int64_t layer = -1) {
  std::string out = std::string(what) + " mb" + std::to_string(microbatch);
  if (layer >= 0) out += " layer " + std::to_string(layer);
  return out;
}

int64_t TotalGradBytes(const MemoryProbe& p) {
  int64_t g = p.embedding_grad_bytes + p.post_grad_bytes;
  for (const LayerMemory& l : p.layers) g += l.grad_bytes;
  return g;
}

void WalkReference(const MemoryProbe& p, const RecomputePlan& plan, int64_t microbatches, Walk* w) {
  const int64_t layers = static_cast<int64_t>(p.layers.size());
  auto recomputed = [&](int64_t l) { return plan.segment_of_layer[l] >= 0; };
  auto segment = [&](int64_t l) { return plan.segments[plan.segment_of_layer[l]]; };
  for (int64_t m = 0; m < microbatches; ++m) {
    w->Add(p.embedding_retained, Where("embedding forward", m));
    for (int64_t l = 0; l < layers; ++l) {
      const LayerMemory& a = p.layers[l];
      if (recomputed(l)) {
        w->Check(a.forward_transient_no_grad, Where("no-grad forward", m, l));
        if (segment(l).last_layer() == l) w->Add(p.input_bytes, Where("segment output", m, l));
      } else {
        w->Check(a.retained + a.forward_transient, Where("forward", m, l));
        w->Add(a.retained, Where("forward", m, l));
      }
    }
    w->Check(p.post_retained + p.post_forward_transient, Where("post-process forward", m));
    w->Add(p.post_retained, Where("post-process forward", m));
    w->Add(p.post_grad_bytes, Where("post-process backward", m));
    w->Check(p.post_backward_transient, Where("post-process backward", m));
    w->Add(-p.post_retained, Where("post-process backward", m));
    for (int64_t l = layers - 1; l >= 0; --l) {
      const LayerMemory& a = p.layers[l];
      if (recomputed(l) && segment(l).last_layer() == l) {
        for (int64_t j = segment(l).first_layer; j <= l; ++j) {
          w->Check(p.layers[j].retained + p.layers[j].forward_transient, Where("replay", m, j));
          w->Add(p.layers[j].retained, Where("replay", m, j));
        }
      }
      w->Check(a.grad_bytes + a.backward_transient, Where("backward", m, l));
      w->Add(a.grad_bytes - a.retained, Where("backward", m, l));
      if (recomputed(l) && segment(l).first_layer == l) {
        w->Add(-p.input_bytes, Where("backward", m, l));
      }
    }
    w->Add(p.embedding_grad_bytes - p.embedding_retained, Where("embedding backward", m));
    w->Add(-TotalGradBytes(p), Where("gradient flush", m));
  }
}

void WalkOverlap(const MemoryProbe& p, const CombinedStepPlan& plan, Walk* w) {
  const RecomputePlan& r = plan.chunk(0).recompute;
  const int64_t layers = plan.chunk(0).layers();
  auto recomputed = [&](int64_t l) { return r.segment_of_layer[l] >= 0; };
  auto tail = [&](int64_t l) {
    return recomputed(l) && r.segments[r.segment_of_layer[l]].last_layer() == l;
  };
  for (const NodeOp& op : plan.ops) {
    const int64_t m = op.microbatch, l = op.layer;
    const bool fwd = op.phase == Phase::kForward;
    if (op.phase == Phase::kReplay && op.node != NodeKind::kSegment) {
      // A replayed layer holds what its forward with grad keeps, from its attn node on.
      if (op.node == NodeKind::kAttn) {
        w->Check(p.layers[l].retained + p.layers[l].forward_transient,
                 Where("segment replay", m, l));
        w->Add(p.layers[l].retained, Where("segment replay", m, l));
      }
      continue;
    }
    switch (op.node) {
      case NodeKind::kPreProcess:
        if (fwd) {
          w->Add(p.embedding_retained, Where("pre_process forward", m));
        } else {
          w->Add(p.embedding_grad_bytes - p.embedding_retained, Where("pre_process backward", m));
        }
        break;
      case NodeKind::kPostProcess:
        if (fwd) {
          w->Check(p.post_retained + p.post_forward_transient, Where("post_process forward", m));
          w->Add(p.post_retained, Where("post_process forward", m));
        } else {
          w->Add(p.post_grad_bytes, Where("post_process backward", m));
          w->Check(p.post_backward_transient, Where("post_process backward", m));
          w->Add(-p.post_retained, Where("post_process backward", m));
          // The last layer's no-grad output fed the post-process and dies with it.
          if (tail(layers - 1)) w->Add(-p.input_bytes, Where("post_process backward", m));
        }
        break;
      case NodeKind::kAttn: {
        const LayerMemory& a = p.layers[l];
        if (fwd) {
          if (recomputed(l)) {
            w->Check(a.forward_transient_no_grad, Where("no-grad attn forward", m, l));
            if (tail(l)) w->Add(p.input_bytes, Where("segment output", m, l));
          } else {
            w->Check(a.retained + a.forward_transient, Where("attn forward", m, l));
            w->Add(a.retained, Where("attn forward", m, l));
          }
        } else {
          w->Check(a.grad_bytes + a.backward_transient, Where("attn backward", m, l));
          w->Add(a.grad_bytes - a.retained, Where("attn backward", m, l));
          // An eager layer fed by a no-grad segment's output frees that output here.
          if (!recomputed(l) && l > 0 && tail(l - 1)) {
            w->Add(-p.input_bytes, Where("attn backward", m, l));
          }
        }
        break;
      }
      case NodeKind::kSegment: {
        const LayerSegment& s = r.segments[op.segment];
        if (op.phase == Phase::kRelease && s.first_layer > 0 && tail(s.first_layer - 1)) {
          w->Add(-p.input_bytes, Where("segment release", m, s.first_layer));
        }
        break;
      }
      case NodeKind::kChunk:
        if (op.phase == Phase::kFlushGrads) w->Add(-TotalGradBytes(p), Where("gradient flush", m));
        break;
      default:
        break;
    }
  }
}

}  // namespace

MemoryProbe ProbeMemory(GptModel& model, ChunkState microbatch) {
  MemoryProbe probe;
  ParameterStore& store = model.parameters();
  const ModelConfig& c = model.config();
  const GptWeights& w = model.weights();
  MicrobatchLosses losses;
  TakeGradBytes(store);

  at::Tensor embedded;
  {
    const int64_t before = Live();
    at::Tensor e = model.Embed(microbatch.input_ids);
    probe.embedding_retained = Live() - before;
    torch::autograd::backward({e}, {at::full_like(e, 1e-3)});
    probe.embedding_grad_bytes = TakeGradBytes(store);
    embedded = e.detach();
  }
  probe.input_bytes = Bytes(embedded);

  // One probe per kind of layer: dense decoder, MoE decoder, MTP depth.
  std::optional<LayerMemory> dense, moe, mtp;
  for (int64_t l = 0; l < c.layers; ++l) {
    std::optional<LayerMemory>& kind = c.layer_is_moe(l) ? moe : dense;
    if (!kind) {
      kind = ProbeLayer(
          [&](const at::Tensor& x) {
            return model.DecoderLayer(w.layers[l], x, microbatch, &losses);
          },
          embedded, store);
    }
    probe.layers.push_back(*kind);
  }
  for (int64_t d = 0; d < c.mtp_layers; ++d) {
    if (!mtp) {
      mtp = ProbeLayer(
          [&](const at::Tensor& x) {
            ChunkState state = microbatch;
            at::Tensor e = model.MtpEmbedding(&state);
            at::Tensor y = model.MtpPrologue(w.mtp[d], e, x);
            y = model.DecoderLayer(w.mtp[d].layer, y, state, &losses);
            return model.MtpFinalNorm(w.mtp[d], y);
          },
          embedded, store);
    }
    probe.layers.push_back(*mtp);
  }

  {
    at::Tensor h = embedded.clone().requires_grad_(true);
    std::vector<at::Tensor> mtp_hidden;
    for (int64_t d = 0; d < c.mtp_layers; ++d) mtp_hidden.push_back(h);
    const int64_t before = Live();
    MemoryTracker::ResetProbePeak();
    MicrobatchLosses post;
    model.PostProcess(h, mtp_hidden, microbatch, &post);
    probe.post_retained = Live() - before;
    probe.post_forward_transient = MemoryTracker::probe_peak_bytes() - Live();
    const int64_t pre_backward = Live();
    MemoryTracker::ResetProbePeak();
    torch::autograd::backward({post.objective}, {at::full_like(post.objective, 1e-3)});
    const int64_t peak = MemoryTracker::probe_peak_bytes();
    probe.post_grad_bytes = TakeGradBytes(store);
    probe.post_backward_transient =
        std::max<int64_t>(0, peak - pre_backward - probe.post_grad_bytes);
  }

  // The data-parallel reduction gathers every rank's replicated main grads (fp32), concatenated
  // once, and sums them into one more buffer.
  const int64_t world = model.layout().dp_size;
  if (world > 1) {
    int64_t replicated = 0;
    for (const Parameter& p : store.all()) {
      if (!p.is_expert) replicated += Bytes(p.main_grad);
    }
    probe.reduction_transient = replicated * (world + 2);
  }
  return probe;
}

MemoryPrediction PredictPeak(const MemoryProbe& probe, const ArmConfig& arm,
                             const ModelConfig& model, int64_t microbatches, int64_t static_bytes) {
  Walk w;
  if (arm.engine == EngineKind::kReference) {
    WalkReference(probe, BuildRecomputePlan(arm.recompute, model.layers, model.mtp_layers),
                  microbatches, &w);
  } else {
    WalkOverlap(probe, BuildCombinedStepPlan(model, microbatches, arm.recompute), &w);
  }
  w.Check(probe.reduction_transient, "gradient reduction");
  MemoryPrediction prediction;
  prediction.static_bytes = static_bytes;
  prediction.peak_bytes = static_bytes + w.peak();
  prediction.peak_phase = w.phase();
  return prediction;
}

}  // namespace bitparity

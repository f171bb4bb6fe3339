#include "runtime/memory_model.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <functional>
#include <optional>

#include "config/recompute_plan.h"
#include "core/memory.h"
#include "overlap_impl/combined_step_plan.h"
#include "schedule/pipeline_schedule.h"

namespace bitparity {
namespace {

// The seed of the probe's own generator (stage inputs of ranks without the embedding).
constexpr uint64_t kProbeSeed = 0x6d656d6f7279;

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

// The layer run the way the overlap arm's nodes run it (overlap_impl/chunk_schedule.h): attn,
// the dispatch all-to-all, mlp, the combine all-to-all and its epilogue, each piece a graph of
// its own on detached inputs, every node's outputs and received tensors kept. Returns the bytes
// that keeps beyond `retained` (one graph of the layer). Collective like the layer itself.
int64_t NodeBoundaryBytes(GptModel& model, const LayerWeights& w, const MtpWeights* mtp,
                          const at::Tensor& input, ChunkState state, int64_t retained) {
  MicrobatchLosses losses;
  const int64_t before = Live();
  std::vector<at::Tensor> kept;
  auto leaf = [](const at::Tensor& t) { return t.detach().requires_grad_(t.is_floating_point()); };
  at::Tensor x = leaf(input);
  if (mtp) x = model.MtpPrologue(*mtp, model.MtpEmbedding(&state), x);
  LayerAttentionOutput attention = model.LayerAttention(w, x, state, &losses);
  const MhcMapping* mhc = model.config().mhc() ? &attention.mlp_mhc : nullptr;
  kept.push_back(attention.residual);
  at::Tensor mlp_output;
  if (!w.is_moe) {
    kept.push_back(attention.mlp_input);
    mlp_output = model.LayerDenseMlp(w, leaf(attention.mlp_input));
    kept.push_back(mlp_output);
    kept.push_back(
        model.LayerCombine(w, leaf(mlp_output), leaf(attention.residual), nullptr, state, mhc));
  } else {
    const RoutingPlan& plan = *attention.plan;
    const DispatchPayload& sent = attention.payload;
    Communicator& comm = model.comm();
    DispatchPayload received;
    received.tokens = comm.AllToAll(sent.tokens.detach(), plan.send_splits, plan.recv_splits);
    received.probs = comm.AllToAll(sent.probs.detach(), plan.send_splits, plan.recv_splits);
    if (sent.route_mask.defined()) {
      received.route_mask = comm.AllToAll(sent.route_mask, plan.send_splits, plan.recv_splits);
    }
    kept.insert(kept.end(), {sent.tokens, sent.probs, received.tokens, received.probs});
    const at::Tensor rows = model.LayerExperts(
        w, {leaf(received.tokens), leaf(received.probs), received.route_mask}, plan);
    const at::Tensor back = comm.AllToAll(rows.detach(), plan.recv_splits, plan.send_splits);
    kept.insert(kept.end(), {rows, back});
    kept.push_back(model.LayerCombine(w, leaf(back), leaf(attention.residual), &plan, state, mhc));
  }
  if (mtp) kept.push_back(model.MtpFinalNorm(*mtp, leaf(kept.back())));
  const int64_t node_retained = Live() - before;
  return std::max<int64_t>(0, node_retained - retained);
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

void WalkAttn(const MemoryProbe& p, const ChunkSizes& c, bool fwd, int64_t m, int64_t l, Walk* w) {
  const LayerMemory& a = c.layer(l);
  if (fwd && c.recomputed(l)) {
    w->Check(a.forward_transient_no_grad, c.Where("no-grad attn forward", m, l));
    if (c.tail(l)) w->Add(p.input_bytes, c.Where("segment output", m, l));
  } else if (fwd) {
    const int64_t kept = a.retained + a.node_boundary_bytes;
    w->Check(kept + a.forward_transient, c.Where("attn forward", m, l));
    w->Add(kept, c.Where("attn forward", m, l));
  } else {
    w->Check(a.grad_bytes + a.backward_transient, c.Where("attn backward", m, l));
    w->Add(a.grad_bytes - a.retained - a.node_boundary_bytes, c.Where("attn backward", m, l));
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
        WalkAttn(p, c, fwd, m, l, w);
        break;
      case NodeKind::kSegment:
        WalkSegment(p, c, op, w, levels);
        break;
      case NodeKind::kChunk:
        if (op.phase == Phase::kFlushGrads) WalkGradientFlush(c, m, w);
        break;
      case NodeKind::kDispatch:  // their bytes are in the attn node's retained and boundary figures
      case NodeKind::kMlp:
      case NodeKind::kCombine:
      case NodeKind::kCombineEpilogue:
      case NodeKind::kMhcPost:
        break;
    }
  }
}

// What this rank holds: every stage of its pipeline rank (the whole model without a pipeline).
struct RankHolds {
  bool embedding = false;
  bool loss = false;
  std::vector<bool> layers;  // decoder layers, then MTP depths
};

RankHolds HeldByRank(const GptModel& model) {
  const ModelConfig& c = model.config();
  const ParallelLayout& layout = model.layout();
  const PipelineLayout pipeline = layout.pipeline.stages.empty()
                                      ? EvenPipelineLayout(1, 1, c.layers, c.mtp_layers)
                                      : layout.pipeline;
  RankHolds holds;
  holds.layers.assign(static_cast<size_t>(c.layers + c.mtp_layers), false);
  for (int64_t chunk = 0; chunk < pipeline.vpp; ++chunk) {
    const PipelineStage& s = pipeline.stage(layout.pp_rank, chunk);
    holds.embedding |= s.embedding;
    holds.loss |= s.loss;
    for (int64_t l = 0; l < s.layers; ++l) {
      holds.layers[static_cast<size_t>(s.first_layer + l)] = true;
    }
    for (int64_t d = 0; d < s.mtp_layers; ++d) {
      holds.layers[static_cast<size_t>(c.layers + s.first_mtp + d)] = true;
    }
  }
  return holds;
}

// A layer's input: the embedded tokens where the rank embeds them (measuring the embedding),
// else hidden states of the same shape drawn from a generator of the probe's own.
at::Tensor ProbeInput(GptModel& model, const ChunkState& microbatch, bool embedding,
                      MemoryProbe* probe) {
  if (!embedding) {
    const ModelConfig& c = model.config();
    at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(kProbeSeed);
    return at::randn({microbatch.input_ids.size(0), c.seq_len, c.residual_width()}, generator,
                     at::TensorOptions().dtype(at::kFloat))
        .to(model.device(), model.compute_dtype());
  }
  const int64_t before = Live();
  at::Tensor e = model.Embed(microbatch.input_ids);
  probe->embedding_retained = Live() - before;
  torch::autograd::backward({e}, {at::full_like(e, 1e-3)});
  probe->embedding_grad_bytes = TakeGradBytes(model.parameters());
  return e.detach();
}

// One probe per kind of layer the rank holds: dense decoder, MoE decoder, MTP depth.
void ProbeLayers(GptModel& model, const ChunkState& microbatch, const std::vector<bool>& local,
                 const at::Tensor& hidden, MemoryProbe* probe) {
  ParameterStore& store = model.parameters();
  const ModelConfig& c = model.config();
  const GptWeights& w = model.weights();
  MicrobatchLosses losses;
  probe->layers.resize(local.size());
  std::optional<LayerMemory> dense, moe, mtp;
  for (int64_t l = 0; l < c.layers; ++l) {
    if (!local[static_cast<size_t>(l)]) continue;
    std::optional<LayerMemory>& kind = c.layer_is_moe(l) ? moe : dense;
    if (!kind) {
      kind = ProbeLayer(
          [&](const at::Tensor& x) {
            return model.DecoderLayer(w.layers[l], x, microbatch, &losses);
          },
          hidden, store);
      kind->node_boundary_bytes =
          NodeBoundaryBytes(model, w.layers[l], nullptr, hidden, microbatch, kind->retained);
      TakeGradBytes(store);
    }
    probe->layers[static_cast<size_t>(l)] = *kind;
  }
  for (int64_t d = 0; d < c.mtp_layers; ++d) {
    if (!local[static_cast<size_t>(c.layers + d)]) continue;
    if (!mtp) {
      mtp = ProbeLayer(
          [&](const at::Tensor& x) {
            ChunkState state = microbatch;
            at::Tensor e = model.MtpEmbedding(&state);
            at::Tensor y = model.MtpPrologue(w.mtp[d], e, x);
            y = model.DecoderLayer(w.mtp[d].layer, y, state, &losses);
            return model.MtpFinalNorm(w.mtp[d], y);
          },
          hidden, store);
      mtp->node_boundary_bytes =
          NodeBoundaryBytes(model, w.mtp[d].layer, &w.mtp[d], hidden, microbatch, mtp->retained);
      TakeGradBytes(store);
    }
    probe->layers[static_cast<size_t>(c.layers + d)] = *mtp;
  }
}

// The post-process (output head, losses), which reads hidden states of one stream.
void ProbePostProcess(GptModel& model, const ChunkState& microbatch, const at::Tensor& hidden,
                      MemoryProbe* probe) {
  const ModelConfig& c = model.config();
  at::Tensor h = hidden.narrow(-1, 0, c.hidden).clone().requires_grad_(true);
  std::vector<at::Tensor> mtp_hidden;
  for (int64_t d = 0; d < c.mtp_layers; ++d) mtp_hidden.push_back(h);
  const int64_t before = Live();
  MemoryTracker::ResetProbePeak();
  MicrobatchLosses post;
  model.PostProcess(h, mtp_hidden, microbatch, &post);
  probe->post_retained = Live() - before;
  probe->post_forward_transient = MemoryTracker::probe_peak_bytes() - Live();
  const int64_t pre_backward = Live();
  MemoryTracker::ResetProbePeak();
  torch::autograd::backward({post.objective}, {at::full_like(post.objective, 1e-3)});
  const int64_t peak = MemoryTracker::probe_peak_bytes();
  probe->post_grad_bytes = TakeGradBytes(model.parameters());
  probe->post_backward_transient =
      std::max<int64_t>(0, peak - pre_backward - probe->post_grad_bytes);
}

}  // namespace

MemoryProbe ProbeMemory(GptModel& model, ChunkState microbatch) {
  MemoryProbe probe;
  ParameterStore& store = model.parameters();
  TakeGradBytes(store);
  const RankHolds holds = HeldByRank(model);
  const at::Tensor hidden = ProbeInput(model, microbatch, holds.embedding, &probe);
  probe.input_bytes = Bytes(hidden);
  probe.input_width = hidden.size(-1);
  ProbeLayers(model, microbatch, holds.layers, hidden, &probe);
  if (holds.loss) ProbePostProcess(model, microbatch, hidden, &probe);
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

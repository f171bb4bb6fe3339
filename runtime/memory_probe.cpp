// The probe half of the memory model (runtime/memory_model.h): one forward and backward per kind
// of layer the rank holds, measured under the tracker; the walks are in memory_model.cpp.
#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <algorithm>
#include <functional>
#include <vector>

#include "core/memory.h"
#include "model/ops.h"
#include "runtime/memory_model.h"

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

// A weight of the layer's mlp node (the dense MLP's or the local experts' linear layers); every
// other delayed weight gradient of the layer is its attn node's (attention, MTP projections).
std::function<bool(const at::Tensor&)> IsMlpNodeWeight(const LayerWeights& w) {
  std::vector<const c10::TensorImpl*> mlp;
  for (const at::Tensor& t : {w.dense.fc1, w.dense.fc2}) {
    if (t.defined()) mlp.push_back(t.unsafeGetTensorImpl());
  }
  for (const ExpertWeights& e : w.moe.local_experts) {
    mlp.insert(mlp.end(), {e.fc1.unsafeGetTensorImpl(), e.fc2.unsafeGetTensorImpl()});
  }
  return [mlp](const at::Tensor& weight) {
    return std::find(mlp.begin(), mlp.end(), weight.unsafeGetTensorImpl()) != mlp.end();
  };
}

// The layer's forward and backward with its weight gradients delayed (delay_wgrad): what the
// pending gradients of the mlp node, then of the attn node, hold until they run, measured as the
// bytes their running lets go of, and the .grad bytes each produces.
void ProbeDelayedWgrads(const std::function<at::Tensor(const at::Tensor&)>& forward,
                        const at::Tensor& input, ParameterStore& store,
                        const std::function<bool(const at::Tensor&)>& is_mlp_weight,
                        LayerMemory* m) {
  ops::DelayedWgrads pending;
  at::Tensor x = input.detach().requires_grad_(true);
  at::Tensor out;
  {
    const ops::DelayWgradScope delayed(&pending);
    out = forward(x);
  }
  torch::autograd::backward({out}, {at::full_like(out, 1e-3)});
  TakeGradBytes(store);
  const int64_t all_pending = Live();
  pending.RunSelected(is_mlp_weight);
  m->mlp_wgrad_grad_bytes = TakeGradBytes(store);
  const int64_t attn_pending = Live();
  pending.Run();
  m->attn_wgrad_grad_bytes = TakeGradBytes(store);
  m->mlp_wgrad_held = all_pending - attn_pending;
  m->attn_wgrad_held = attn_pending - Live();
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

// Every size of one layer (`forward`, with weights `w` and, for an MTP depth, `mtp`).
LayerMemory ProbeLayerKind(GptModel& model,
                           const std::function<at::Tensor(const at::Tensor&)>& forward,
                           const LayerWeights& w, const MtpWeights* mtp, const at::Tensor& hidden,
                           const ChunkState& microbatch) {
  ParameterStore& store = model.parameters();
  LayerMemory m = ProbeLayer(forward, hidden, store);
  m.node_boundary_bytes = NodeBoundaryBytes(model, w, mtp, hidden, microbatch, m.retained);
  TakeGradBytes(store);
  ProbeDelayedWgrads(forward, hidden, store, IsMlpNodeWeight(w), &m);
  return m;
}

// One probe per kind of layer the rank holds: dense decoder, MoE decoder, MTP depth.
void ProbeLayers(GptModel& model, const ChunkState& microbatch, const std::vector<bool>& local,
                 const at::Tensor& hidden, MemoryProbe* probe) {
  const ModelConfig& c = model.config();
  const GptWeights& w = model.weights();
  MicrobatchLosses losses;
  probe->layers.resize(local.size());
  std::optional<LayerMemory> dense, moe, mtp;
  for (int64_t l = 0; l < c.layers; ++l) {
    if (!local[static_cast<size_t>(l)]) continue;
    std::optional<LayerMemory>& kind = c.layer_is_moe(l) ? moe : dense;
    if (!kind) {
      kind = ProbeLayerKind(
          model,
          [&](const at::Tensor& x) {
            return model.DecoderLayer(w.layers[l], x, microbatch, &losses);
          },
          w.layers[l], nullptr, hidden, microbatch);
    }
    probe->layers[static_cast<size_t>(l)] = *kind;
  }
  for (int64_t d = 0; d < c.mtp_layers; ++d) {
    if (!local[static_cast<size_t>(c.layers + d)]) continue;
    if (!mtp) {
      mtp = ProbeLayerKind(
          model,
          [&](const at::Tensor& x) {
            ChunkState state = microbatch;
            at::Tensor e = model.MtpEmbedding(&state);
            at::Tensor y = model.MtpPrologue(w.mtp[d], e, x);
            y = model.DecoderLayer(w.mtp[d].layer, y, state, &losses);
            return model.MtpFinalNorm(w.mtp[d], y);
          },
          w.mtp[d].layer, &w.mtp[d], hidden, microbatch);
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

}  // namespace bitparity

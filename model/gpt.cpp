#include "model/gpt.h"

#include <torch/torch.h>

#include "numerics/flop_count.h"
#include "numerics/random.h"
#include "trace/node_probes.h"

namespace bitparity {

at::ScalarType ComputeDtype(PrecisionRecipe precision) {
  return precision == PrecisionRecipe::kFp32 ? at::kFloat : at::kBFloat16;
}

namespace {

// The output head stays in high precision under FP8 recipes, as upstream.
PrecisionConfig HeadPrecision(const PrecisionConfig& precision) {
  PrecisionConfig head = precision;
  if (precision.fp8()) head.recipe = PrecisionRecipe::kBf16;
  return head;
}

}  // namespace

void RestoreChunkStateField(ChunkStateField field, const ChunkState& from, ChunkState* to) {
  switch (field) {
    case ChunkStateField::kInputIds:
      to->input_ids = from.input_ids;
      return;
    case ChunkStateField::kPositionIds:
      to->position_ids = from.position_ids;
      return;
    case ChunkStateField::kPaddingMask:
      to->padding_mask = from.padding_mask;
      return;
    case ChunkStateField::kMtpHiddenStates:
      to->mtp_hidden_states = from.mtp_hidden_states;
      return;
    case ChunkStateField::kMhcMultistream:
      to->mhc_multistream = from.mhc_multistream;
      return;
  }
}

GptModel::GptModel(const ModelConfig& config, const ParallelLayout& layout,
                   const PrecisionConfig& precision, Dispatcher dispatcher, uint64_t seed,
                   double loss_grad_scale, std::shared_ptr<Communicator> comm,
                   const ModelBugs& bugs)
    : config_(config),
      layout_(layout),
      precision_(precision),
      dispatcher_(dispatcher),
      seed_(seed),
      loss_grad_scale_(loss_grad_scale),
      comm_(std::move(comm)),
      store_(ComputeDtype(precision.recipe), seed, comm_->device()),
      weights_(BuildGptWeights(config, layout, &store_)),
      rope_(ops::MakeRopeTables(config.seq_len, config.head_dim(), config.rope_theta,
                                comm_->device())),
      bugs_(bugs) {}

at::Tensor GptModel::Norm(const at::Tensor& x, const at::Tensor& weight) const {
  return bugs_.composite_rms_norm ? ops::CompositeRmsNorm(x, weight, config_.norm_eps)
                                  : ops::RmsNorm(x, weight, config_.norm_eps);
}

uint64_t GptModel::DropoutKey(const ChunkState& state, int64_t layer, int64_t site) const {
  return MixKeys({seed_, 0xD5, static_cast<uint64_t>(state.iteration),
                  static_cast<uint64_t>(layout_.dp_rank), static_cast<uint64_t>(state.microbatch),
                  static_cast<uint64_t>(layer), static_cast<uint64_t>(site)});
}

at::Tensor GptModel::Embed(const at::Tensor& ids) const {
  at::Tensor embedded = at::embedding(weights_.embedding, ids);
  return config_.mhc() ? MhcExpand(embedded, config_.mhc_streams) : embedded;
}

LayerAttentionOutput GptModel::LayerAttention(const LayerWeights& layer, const at::Tensor& x,
                                              const ChunkState& state,
                                              MicrobatchLosses* losses) const {
  const AttentionWeights& a = layer.attention;
  const int64_t n = config_.mhc_streams;
  LayerAttentionOutput out;
  // Under mHC the streams are read three times each (mapping, aggregate, update): one Fanout.
  std::vector<at::Tensor> streams;
  MhcMapping attention_mhc;
  at::Tensor attention_input = x;
  if (config_.mhc()) {
    streams = ops::Fanout(x, 3);
    attention_mhc =
        ComputeMhcMapping(streams[0], layer.attention_mhc, n, config_.mhc_sinkhorn_iterations);
    attention_input = MhcAggregate(streams[1], attention_mhc.pre, n);
  }
  at::Tensor attention;
  {
    const GemmCategoryScope gemms(GemmCategory::kAttention);
    attention =
        ops::CausalSelfAttention(Norm(attention_input, a.norm), a.qkv, a.proj, config_.heads, rope_,
                                 precision_, state.position_ids, state.padding_mask,
                                 config_.attention_dropout, DropoutKey(state, layer.index, 2));
  }
  attention = ops::Dropout(attention, config_.dropout, DropoutKey(state, layer.index, 0));
  at::Tensor mlp_input;
  if (config_.mhc()) {
    streams = ops::Fanout(MhcUpdate(streams[2], attention, attention_mhc, n), 3);
    out.mlp_mhc = ComputeMhcMapping(streams[0], layer.mlp_mhc, n, config_.mhc_sinkhorn_iterations);
    mlp_input = MhcAggregate(streams[1], out.mlp_mhc.pre, n);
    out.residual = streams[2];
  } else {
    out.residual = x + attention;
    mlp_input = out.residual;
  }
  if (!layer.is_moe) {
    out.mlp_input = Norm(mlp_input, layer.dense.norm);
    return out;
  }
  at::Tensor tokens = Norm(mlp_input, layer.moe.norm).reshape({-1, config_.hidden});
  RouterResult routing =
      Route(tokens, layer.moe.router, config_.topk, config_.aux_loss_coeff, loss_grad_scale_,
            /*attach_aux_scaler=*/!bugs_.aux_loss_in_objective,
            state.padded_data ? state.padding_mask : at::Tensor());
  if (bugs_.aux_loss_in_objective && torch::GradMode::is_enabled()) {
    losses->aux_terms.push_back(routing.aux_loss);
  }
  losses->aux_losses[layer.index] = routing.aux_loss.item<float>();
  out.payload = PermuteTokens(tokens, routing, layout_, dispatcher_, *comm_, &out.plan);
  return out;
}

at::Tensor GptModel::LayerDenseMlp(const LayerWeights& layer, const at::Tensor& mlp_input) const {
  const GemmCategoryScope gemms(GemmCategory::kDense);
  return ops::SwiGlu(mlp_input, layer.dense.fc1, layer.dense.fc2, at::Tensor(), precision_);
}

at::Tensor GptModel::LayerExperts(const LayerWeights& layer, const DispatchPayload& received,
                                  const RoutingPlan& plan) const {
  return RunExperts(received, plan, layer.moe, precision_);
}

at::Tensor GptModel::LayerCombine(const LayerWeights& layer, const at::Tensor& mlp_rows,
                                  const at::Tensor& residual, const RoutingPlan* plan,
                                  const ChunkState& state, const MhcMapping* mhc) const {
  return LayerResidual(residual, LayerMlpOutput(layer, mlp_rows, plan, state), mhc);
}

at::Tensor GptModel::LayerMlpOutput(const LayerWeights& layer, const at::Tensor& mlp_rows,
                                    const RoutingPlan* plan, const ChunkState& state) const {
  const at::Tensor& ids = state.input_ids;
  at::Tensor mlp =
      plan ? UnpermuteTokens(mlp_rows, *plan).view({ids.size(0), ids.size(1), config_.hidden})
           : mlp_rows;
  return ops::Dropout(mlp, config_.dropout, DropoutKey(state, layer.index, 1));
}

at::Tensor GptModel::LayerResidual(const at::Tensor& residual, const at::Tensor& mlp,
                                   const MhcMapping* mhc) const {
  return mhc ? MhcUpdate(residual, mlp, *mhc, config_.mhc_streams) : residual + mlp;
}

at::Tensor GptModel::DecoderLayer(const LayerWeights& layer, const at::Tensor& x,
                                  const ChunkState& state, MicrobatchLosses* losses) const {
  // Node probes (trace/node_probes.h) at the points where the overlap engine's nodes begin and
  // end: the reference engine's records for the same keys. The last decoder layer's output is
  // probed by the engine, after the final norm that the overlap's last node includes.
  const bool probes = NodeProbes::enabled();
  ProbeSite site;
  if (probes)
    site = ReferenceProbeSite(state.microbatch, layer.index, config_.layers, NodeKind::kAttn);
  auto outputs = [&](NodeKind node, const std::vector<at::Tensor>& tensors) {
    if (!probes) return;
    site.node = node;
    NodeProbes::RecordOutputs(site, tensors);
  };
  auto input_gradients = [&](NodeKind node, const std::vector<at::Tensor>& tensors) {
    if (!probes) return;
    site.node = node;
    NodeProbes::RecordInputGradients(site, tensors);
  };
  const bool mtp = layer.index >= config_.layers;  // an MTP depth's attn input is its prologue's
  const bool last_decoder = layer.index == config_.layers - 1;
  if (!mtp) input_gradients(NodeKind::kAttn, {x});

  LayerAttentionOutput attention = LayerAttention(layer, x, state, losses);
  const MhcMapping* mhc = config_.mhc() ? &attention.mlp_mhc : nullptr;
  at::Tensor returned;
  const RoutingPlan* plan = nullptr;
  if (!layer.is_moe) {
    outputs(NodeKind::kAttn, {attention.mlp_input});
    input_gradients(NodeKind::kMlp, {attention.mlp_input});
    returned = LayerDenseMlp(layer, attention.mlp_input);
    outputs(NodeKind::kMlp, {returned});
  } else {
    outputs(NodeKind::kAttn,
            {attention.payload.tokens, attention.payload.probs, attention.payload.route_mask});
    plan = attention.plan.get();
    Communicator* comm = comm_.get();
    DispatchPayload received;
    received.tokens =
        AllToAllWithGrad(attention.payload.tokens, comm, plan->send_splits, plan->recv_splits);
    received.probs =
        AllToAllWithGrad(attention.payload.probs, comm, plan->send_splits, plan->recv_splits);
    if (attention.payload.route_mask.defined()) {
      received.route_mask =
          comm->AllToAll(attention.payload.route_mask, plan->send_splits, plan->recv_splits);
    }
    input_gradients(NodeKind::kMlp, {received.tokens, received.probs});
    at::Tensor rows = LayerExperts(layer, received, *plan);
    outputs(NodeKind::kMlp, {rows});
    returned = AllToAllWithGrad(rows, comm, plan->recv_splits, plan->send_splits);
  }
  input_gradients(NodeKind::kCombine, {returned});
  // LayerCombine, in its two parts when mHC probes them apart (the overlap's moe_combine and
  // mhc_post nodes).
  const at::Tensor mlp = LayerMlpOutput(layer, returned, plan, state);
  if (mhc) {
    outputs(NodeKind::kCombine, {mlp});
    input_gradients(NodeKind::kMhcPost, {mlp});
  }
  at::Tensor out = LayerResidual(attention.residual, mlp, mhc);
  if (!last_decoder) outputs(mhc ? NodeKind::kMhcPost : NodeKind::kCombine, {out});
  return out;
}

void GptModel::ProbeDecoderOutput(const at::Tensor& main, const ChunkState& state) const {
  if (!NodeProbes::enabled()) return;
  NodeProbes::RecordOutputs(
      ReferenceProbeSite(state.microbatch, config_.layers - 1, config_.layers,
                         config_.mhc() ? NodeKind::kMhcPost : NodeKind::kCombine),
      {main});
}

at::Tensor GptModel::ProbedMtpFinalNorm(const MtpWeights& mtp, const at::Tensor& x,
                                        const ChunkState& state) const {
  if (!NodeProbes::enabled()) return MtpFinalNorm(mtp, x);
  NodeProbes::RecordInputGradients(ReferenceProbeSite(state.microbatch, mtp.layer.index,
                                                      config_.layers, NodeKind::kMtpPostProcess),
                                   {x});
  return MtpFinalNorm(mtp, x);
}

void GptModel::ProbeMtpOutput(const at::Tensor& main, const std::vector<at::Tensor>& mtp_hidden,
                              const ChunkState& state) const {
  if (!NodeProbes::enabled() || mtp_hidden.empty()) return;
  const ProbeSite site =
      ReferenceProbeSite(state.microbatch, config_.layers + config_.mtp_layers - 1, config_.layers,
                         NodeKind::kMtpPostProcess);
  std::vector<at::Tensor> stacked{main};
  stacked.insert(stacked.end(), mtp_hidden.begin(), mtp_hidden.end());
  NodeProbes::RecordOutputs(site, {at::cat(stacked, 0)});
}

at::Tensor GptModel::FinalNorm(const at::Tensor& x) const {
  if (!config_.mhc()) return Norm(x, weights_.final_norm);
  return Norm(MhcContract(x, config_.mhc_streams), weights_.final_norm);
}

DecoderOutput GptModel::SplitDecoderOutput(const at::Tensor& x) const {
  DecoderOutput out;
  if (config_.mhc() && config_.mtp_layers > 0) {
    std::vector<at::Tensor> copies = ops::Fanout(x, 2);
    out.main = FinalNorm(copies[0]);
    out.mtp_input = copies[1];
    return out;
  }
  out.main = FinalNorm(x);
  out.mtp_input = out.main;
  return out;
}

at::Tensor GptModel::MtpEmbedding(ChunkState* state) const {
  const int64_t b = state->input_ids.size(0), s = state->input_ids.size(1);
  const at::TensorOptions options = state->input_ids.options();
  at::Tensor positions = state->position_ids.defined()
                             ? state->position_ids
                             : at::arange(s, options).unsqueeze(0).expand({b, s}).contiguous();
  at::Tensor padded = state->padding_mask.defined() ? state->padding_mask
                                                    : at::zeros({b, s}, options.dtype(at::kBool));
  state->input_ids = ops::RollLeft(state->input_ids, 1, 0);
  state->position_ids = ops::RollLeft(positions, 1, 0);
  state->padding_mask = ops::RollLeft(padded, 1, 1);
  return at::embedding(weights_.embedding, state->input_ids);
}

at::Tensor GptModel::MtpPrologue(const MtpWeights& mtp, const at::Tensor& embedding,
                                 const at::Tensor& hidden) const {
  if (config_.mhc()) {
    const int64_t b = hidden.size(0), s = hidden.size(1), h = config_.hidden;
    const int64_t n = config_.mhc_streams;
    at::Tensor e = ops::Linear(Norm(embedding, mtp.enorm), mtp.e_proj, precision_);
    at::Tensor per_stream =
        ops::Linear(Norm(hidden.view({b, s, n, h}), mtp.hnorm), mtp.h_proj, precision_);
    return (per_stream + e.unsqueeze(2)).reshape({b, s, n * h});
  }
  at::Tensor joined = at::cat({Norm(embedding, mtp.enorm), Norm(hidden, mtp.hnorm)}, -1);
  return ops::Linear(joined, mtp.eh_proj, precision_);
}

at::Tensor GptModel::MtpFinalNorm(const MtpWeights& mtp, const at::Tensor& x) const {
  if (!config_.mhc()) return Norm(x, mtp.final_norm);
  return Norm(MhcContract(x, config_.mhc_streams), mtp.final_norm);
}

void GptModel::PostProcess(const at::Tensor& main_hidden, const std::vector<at::Tensor>& mtp_hidden,
                           const ChunkState& state, MicrobatchLosses* losses) const {
  const PrecisionConfig head_precision = HeadPrecision(precision_);
  const GemmCategoryScope gemms(GemmCategory::kHead);
  at::Tensor lm = ops::MaskedCrossEntropy(ops::Linear(main_hidden, weights_.head, head_precision),
                                          state.labels, state.loss_mask);
  losses->lm_loss = lm.item<float>();
  losses->objective = lm;
  for (const at::Tensor& aux : losses->aux_terms) losses->objective = losses->objective + aux;
  losses->objective_value = losses->objective.item<float>();
  if (mtp_hidden.empty()) return;
  losses->mtp_losses.clear();
  at::Tensor mtp_sum;
  for (size_t d = 0; d < mtp_hidden.size(); ++d) {
    const int64_t shift = static_cast<int64_t>(d) + 1;
    at::Tensor loss = ops::MaskedCrossEntropy(
        ops::Linear(mtp_hidden[d], weights_.head, head_precision),
        ops::RollLeft(state.labels, shift, 0), ops::RollLeft(state.loss_mask, shift, 0));
    losses->mtp_losses.push_back(loss.item<float>());
    mtp_sum = d == 0 ? loss : mtp_sum + loss;
  }
  losses->objective = losses->objective +
                      mtp_sum * (config_.mtp_loss_scale / static_cast<double>(mtp_hidden.size()));
  losses->objective_value = losses->objective.item<float>();
}

}  // namespace bitparity

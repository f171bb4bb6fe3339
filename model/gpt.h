#ifndef BITPARITY_MODEL_GPT_H_
#define BITPARITY_MODEL_GPT_H_

// The DeepSeek-V3-shaped MoE GPT, exposed as the pieces both arms compose: pre-process
// (embedding), per layer attention / dispatch / experts / combine, MTP prologue and final
// norm, and post-process (output head and losses). The reference arm chains them into one
// autograd graph per microbatch; the overlap arm runs each piece as a schedule node.

#include <ATen/ATen.h>

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "comm/communicator.h"
#include "comm/rank_context.h"
#include "config/recipe.h"
#include "model/chunk_state_field.h"
#include "model/model_bugs.h"
#include "model/moe.h"
#include "model/ops.h"
#include "model/parameters.h"

namespace bitparity {

// One microbatch's inputs plus the state its forward mutates (Megatron's ModelChunkState). The
// mutable fields (model/chunk_state_field.h) are what a recompute replay must see as they were when
// the replayed forward first ran: every segment snapshot captures and restores all of them.
struct ChunkState {
  int64_t iteration = 0;   // 1-based
  int64_t microbatch = 0;  // index among this rank's microbatches
  at::Tensor input_ids;    // [b, s] int64; rolled left by one per MTP depth entered (fill 0)
  // [b, s] int64, the rotary position of each token: 0, 1, ... within its sample, 0 on padding;
  // rolled with input_ids (fill 0). Undefined: every row is 0 .. s-1 (no padding, no MTP yet).
  at::Tensor position_ids;
  // [b, s] bool, true on a padded token (attention skips it as a key); rolled with input_ids
  // (fill true). Undefined: nothing is padded.
  at::Tensor padding_mask;
  // Whether the data pads its samples: only then does the router keep padding tokens out of its
  // loss (Megatron's router is handed a padding mask only then; without one an MTP depth's
  // rolled-in last token counts). Not a snapshot field: fixed for the microbatch.
  bool padded_data = false;
  at::Tensor labels;                          // [b, s] int64
  at::Tensor loss_mask;                       // [b, s] fp32, 0 on padding
  std::vector<at::Tensor> mtp_hidden_states;  // hidden states that feed the MTP losses
  // Under mHC with MTP: the last decoder layer's streams, detached where they are made (the
  // overlap arm's one cross-layer bridge) and read by the MTP depth; cleared by the last MTP
  // post-process.
  at::Tensor mhc_multistream;
  // The bridge leaf an MTP pass read, parked with the gradient its backward leaves on it, until
  // a replay of the producer installs a new leaf and takes the gradient over. Not a snapshot
  // field: it must survive the replays.
  at::Tensor mhc_grad_carrier;
};

// Copies `field` of `from` into `to`.
void RestoreChunkStateField(ChunkStateField field, const ChunkState& from, ChunkState* to);

// Loss values of one microbatch. Aux losses are keyed by layer so that a recompute replay
// overwrites the value recorded by the first pass instead of counting it twice.
struct MicrobatchLosses {
  at::Tensor objective;  // differentiable: lm + mtp_loss_scale / D * sum_d mtp_d
  float objective_value = 0;
  float lm_loss = 0;
  std::vector<float> mtp_losses;
  std::map<int64_t, float> aux_losses;
  std::vector<at::Tensor> aux_terms;  // only with ModelBugs::aux_loss_in_objective
};

// The attention piece of a layer and what it hands to the rest of the layer.
struct LayerAttentionOutput {
  // x + attention(norm(x)), [b, s, h]; under mHC the streams after the attention sublayer.
  at::Tensor residual;
  at::Tensor mlp_input;                     // dense layers: the pre-MLP norm output [b, s, h]
  DispatchPayload payload;                  // MoE layers: what the dispatch all-to-all sends
  std::shared_ptr<const RoutingPlan> plan;  // MoE layers: this microbatch's routing metadata
  MhcMapping mlp_mhc;                       // under mHC: the MLP sublayer's mapping
};

// The last decoder layer's output as its consumers take it.
struct DecoderOutput {
  at::Tensor main;       // final-normed (under mHC contracted first): the main loss's input
  at::Tensor mtp_input;  // the MTP depth's hidden input: `main`, or under mHC the streams
};

class GptModel {
 public:
  // `loss_grad_scale` seeds every microbatch's backward (1 / (microbatches x DP size)); the aux
  // loss gradient uses the same scale.
  // Its parameters and computations live on `comm`'s device. `bugs` re-creates silent bugs for
  // the tests that show the checks catch them (off by default).
  GptModel(const ModelConfig& config, const ParallelLayout& layout,
           const PrecisionConfig& precision, Dispatcher dispatcher, uint64_t seed,
           double loss_grad_scale, std::shared_ptr<Communicator> comm,
           const ModelBugs& bugs = ModelBugs());

  const ModelConfig& config() const { return config_; }
  const ParallelLayout& layout() const { return layout_; }
  ParameterStore& parameters() { return store_; }
  const GptWeights& weights() const { return weights_; }
  Communicator& comm() const { return *comm_; }
  const PrecisionConfig& precision() const { return precision_; }
  const at::Device& device() const { return store_.device(); }
  Dispatcher dispatcher() const { return dispatcher_; }
  double loss_grad_scale() const { return loss_grad_scale_; }
  at::ScalarType compute_dtype() const { return store_.compute_dtype(); }

  // Pre-process: token embedding, [b, s] -> [b, s, h] (under mHC copied onto the streams,
  // [b, s, n * h]).
  at::Tensor Embed(const at::Tensor& ids) const;

  // attn: norm, attention, dropout, residual, pre-MLP norm and, for MoE layers, router and local
  // permutation (including the exchange of split sizes). Records the layer's aux loss.
  LayerAttentionOutput LayerAttention(const LayerWeights& layer, const at::Tensor& x,
                                      const ChunkState& state, MicrobatchLosses* losses) const;
  // mlp: the dense SwiGLU on `attention.mlp_input`, or the local experts on received rows.
  at::Tensor LayerDenseMlp(const LayerWeights& layer, const at::Tensor& mlp_input) const;
  at::Tensor LayerExperts(const LayerWeights& layer, const DispatchPayload& received,
                          const RoutingPlan& plan) const;
  // combine epilogue: unpermute (MoE), dropout, residual add -> the layer output [b, s, h]
  // (under mHC the streams, with `mhc` the MLP sublayer's mapping). The two halves:
  at::Tensor LayerCombine(const LayerWeights& layer, const at::Tensor& mlp_rows,
                          const at::Tensor& residual, const RoutingPlan* plan,
                          const ChunkState& state, const MhcMapping* mhc = nullptr) const;
  // unpermute (MoE) and dropout -> the MLP sublayer's output [b, s, h];
  at::Tensor LayerMlpOutput(const LayerWeights& layer, const at::Tensor& mlp_rows,
                            const RoutingPlan* plan, const ChunkState& state) const;
  // the residual add, or under mHC the streams' update (the overlap arm's mhc_post node).
  at::Tensor LayerResidual(const at::Tensor& residual, const at::Tensor& mlp,
                           const MhcMapping* mhc) const;

  // The whole layer as one differentiable function, all-to-alls blocking. With node probes on
  // (trace/node_probes.h) it records the reference engine's probes of the layer.
  at::Tensor DecoderLayer(const LayerWeights& layer, const at::Tensor& x, const ChunkState& state,
                          MicrobatchLosses* losses) const;
  // The reference engine's probe of the last decoder layer's output after the final norm (the
  // overlap's last node of that layer includes it); `main` is SplitDecoderOutput's main.
  void ProbeDecoderOutput(const at::Tensor& main, const ChunkState& state) const;
  // MtpFinalNorm, whose input gradient is the overlap's mtp_post_process node's.
  at::Tensor ProbedMtpFinalNorm(const MtpWeights& mtp, const at::Tensor& x,
                                const ChunkState& state) const;
  // The reference engine's probe of the last MTP depth's output as the overlap's last
  // mtp_post_process node gives it: the main hidden states with every depth's stacked under them.
  void ProbeMtpOutput(const at::Tensor& main, const std::vector<at::Tensor>& mtp_hidden,
                      const ChunkState& state) const;

  // The decoder's final norm (under mHC after the streams' mean).
  at::Tensor FinalNorm(const at::Tensor& x) const;
  // The last decoder layer's output for the main loss and for MTP: under mHC with MTP the streams
  // go to both (one Fanout), otherwise the final-normed output does.
  DecoderOutput SplitDecoderOutput(const at::Tensor& x) const;

  // MTP depth d: rolls state->input_ids, position_ids and padding_mask left by one (filling 0, 0
  // and padded) and embeds the rolled ids.
  at::Tensor MtpEmbedding(ChunkState* state) const;
  // MTP depth d before its transformer layer: eh_proj(cat(enorm(embedding), hnorm(hidden))), or
  // under mHC per stream e_proj(enorm(embedding)) + h_proj(hnorm(stream)).
  at::Tensor MtpPrologue(const MtpWeights& mtp, const at::Tensor& embedding,
                         const at::Tensor& hidden) const;
  // The depth's final norm (under mHC after the streams' mean).
  at::Tensor MtpFinalNorm(const MtpWeights& mtp, const at::Tensor& x) const;

  // Post-process: the shared output head on the main hidden states and on each MTP depth's
  // hidden states, and the losses. Fills `losses` (objective, lm and MTP values).
  void PostProcess(const at::Tensor& main_hidden, const std::vector<at::Tensor>& mtp_hidden,
                   const ChunkState& state, MicrobatchLosses* losses) const;

 private:
  // The key of a dropout mask. Sites: 0 the attention output, 1 the MLP output, 2 the attention
  // probabilities.
  uint64_t DropoutKey(const ChunkState& state, int64_t layer, int64_t site) const;
  // RMSNorm with the model's epsilon (composed of elementary ops under
  // ModelBugs::composite_rms_norm).
  at::Tensor Norm(const at::Tensor& x, const at::Tensor& weight) const;

  ModelConfig config_;
  ParallelLayout layout_;
  PrecisionConfig precision_;
  Dispatcher dispatcher_;
  uint64_t seed_;
  double loss_grad_scale_;
  std::shared_ptr<Communicator> comm_;
  ParameterStore store_;
  GptWeights weights_;
  ops::RopeTables rope_;
  // ModelBugs::aux_loss_in_objective: the aux losses are added to the objective instead of
  // injecting their gradient through the router probabilities.
  ModelBugs bugs_;
};

// The dtype the model computes in for a precision recipe (FP8 recipes compute in bf16 around
// their quantized GEMMs).
at::ScalarType ComputeDtype(PrecisionRecipe precision);

}  // namespace bitparity

#endif  // BITPARITY_MODEL_GPT_H_

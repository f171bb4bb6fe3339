#include "reference/reference_engine.h"

#include <torch/torch.h>

#include "core/memory.h"
#include "reference/checkpoint.h"

namespace bitparity {

ReferenceEngine::ReferenceEngine(GptModel* model, const RecomputeConfig& recompute)
    : model_(model),
      plan_(BuildRecomputePlan(recompute, model->config().layers, model->config().mtp_layers)),
      whole_chunk_(recompute.full() && recompute.unit == RecomputeUnit::kChunk) {}

void ReferenceEngine::WholeChunkForward(ChunkState* state, MicrobatchLosses* losses) {
  const GptWeights& w = model_->weights();
  const int64_t depths = model_->config().mtp_layers;
  // The shifted-token embeddings stay outside the checkpoint (as in Megatron's MTP layout);
  // they are inputs of the recomputed region.
  std::vector<at::Tensor> inputs{model_->Embed(state->input_ids)};
  for (int64_t d = 0; d < depths; ++d) inputs.push_back(model_->MtpEmbedding(state));
  GptModel* model = model_;
  const ChunkState* st = state;
  MicrobatchLosses* ls = losses;
  at::Tensor hidden = Checkpoint(
      [model, &w, st, ls, depths](const std::vector<at::Tensor>& in) {
        at::Tensor x = in[0];
        for (const LayerWeights& layer : w.layers) x = model->DecoderLayer(layer, x, *st, ls);
        std::vector<at::Tensor> outputs{model->FinalNorm(x)};
        for (int64_t d = 0; d < depths; ++d) {
          const MtpWeights& mtp = w.mtp[d];
          at::Tensor y = model->MtpPrologue(mtp, in[1 + d], outputs.back());
          outputs.push_back(model->MtpFinalNorm(mtp, model->DecoderLayer(mtp.layer, y, *st, ls)));
        }
        return at::cat(outputs, 0);
      },
      inputs);
  std::vector<at::Tensor> chunks = hidden.chunk(1 + depths, 0);
  model_->PostProcess(chunks[0], std::vector<at::Tensor>(chunks.begin() + 1, chunks.end()), *state,
                      losses);
}

at::Tensor ReferenceEngine::DecoderForward(const at::Tensor& embedded, const ChunkState& state,
                                           MicrobatchLosses* losses) {
  const GptWeights& w = model_->weights();
  const int64_t layers = model_->config().layers;
  at::Tensor hidden = embedded;
  for (int64_t l = 0; l < layers;) {
    const LayerSegment* segment = plan_.SegmentStartingAt(l);
    if (!segment) {
      hidden = model_->DecoderLayer(w.layers[l], hidden, state, losses);
      ++l;
      continue;
    }
    const int64_t first = segment->first_layer, count = segment->num_layers;
    GptModel* model = model_;
    hidden = Checkpoint(
        [model, &w, &state, losses, first, count](const std::vector<at::Tensor>& in) {
          at::Tensor x = in[0];
          for (int64_t i = first; i < first + count; ++i) {
            x = model->DecoderLayer(w.layers[i], x, state, losses);
          }
          return x;
        },
        {hidden});
    l += count;
  }
  return model_->FinalNorm(hidden);
}

void ReferenceEngine::Forward(ChunkState* state, MicrobatchLosses* losses) {
  if (whole_chunk_) return WholeChunkForward(state, losses);
  const GptWeights& w = model_->weights();
  const int64_t layers = model_->config().layers;
  at::Tensor hidden = DecoderForward(model_->Embed(state->input_ids), *state, losses);

  // MTP depths, Megatron layout: the shifted embedding lookup outside the checkpoint, the
  // norms, projection, transformer layer and final norm inside it.
  std::vector<at::Tensor> mtp_hidden;
  at::Tensor previous = hidden;
  for (int64_t d = 0; d < model_->config().mtp_layers; ++d) {
    const MtpWeights& mtp = w.mtp[d];
    at::Tensor embedding = model_->MtpEmbedding(state);
    GptModel* model = model_;
    const ChunkState* st = state;
    MicrobatchLosses* ls = losses;
    auto body = [model, &mtp, st, ls](const std::vector<at::Tensor>& in) {
      at::Tensor x = model->MtpPrologue(mtp, in[0], in[1]);
      x = model->DecoderLayer(mtp.layer, x, *st, ls);
      return model->MtpFinalNorm(mtp, x);
    };
    at::Tensor out = plan_.recomputed(layers + d) ? Checkpoint(body, {embedding, previous})
                                                  : body({embedding, previous});
    mtp_hidden.push_back(out);
    previous = out;
  }
  model_->PostProcess(hidden, mtp_hidden, *state, losses);
}

std::vector<MicrobatchLosses> ReferenceEngine::RunIteration(std::vector<ChunkState>& microbatches) {
  std::vector<MicrobatchLosses> all;
  ParameterStore& params = model_->parameters();
  for (ChunkState& state : microbatches) {
    MicrobatchLosses losses;
    Forward(&state, &losses);
    const std::string mb = " mb" + std::to_string(state.microbatch);
    MemoryTimeline::Mark("forward" + mb);
    at::Tensor seed = at::full({}, model_->loss_grad_scale(), losses.objective.options());
    torch::autograd::backward({losses.objective}, {seed});
    MemoryTimeline::Mark("backward" + mb);
    params.FlushGradsToMainGrads();
    losses.objective = at::Tensor();
    all.push_back(std::move(losses));
  }
  return all;
}

}  // namespace bitparity

#include "reference/reference_engine.h"

#include <torch/torch.h>

#include <map>

#include "core/memory.h"
#include "reference/checkpoint.h"
#include "schedule/pipeline_schedule.h"
#include "trace/node_probes.h"

namespace bitparity {

ReferenceEngine::ReferenceEngine(GptModel* model, const RecomputeConfig& recompute,
                                 std::shared_ptr<Communicator> pipeline, PipelineLanes lanes)
    : model_(model),
      plan_(BuildRecomputePlan(recompute, model->config().layers, model->config().mtp_layers)),
      whole_chunk_(recompute.full() && recompute.unit == RecomputeUnit::kChunk),
      pipeline_(std::move(pipeline)) {
  if (!pipeline_) return;
  channel_ = std::make_unique<PipelineChannel>(pipeline_.get(), lanes);
  const ParallelLayout& layout = model->layout();
  for (int64_t c = 0; c < layout.pipeline.vpp; ++c) {
    const PipelineStage& s = layout.pipeline.stage(layout.pp_rank, c);
    chunk_plans_.push_back(BuildRecomputePlan(recompute, s.layers, s.mtp_layers));
  }
}

void ReferenceEngine::ProbeMtpInput(const at::Tensor& decoder_output, const ChunkState& state) {
  // The overlap's first MTP depth takes the decoder's output as its attn node's input; its input
  // gradient is the decoder output's whole gradient (main loss and MTP). Under mHC the depth
  // reads the streams' bridge instead, which has no counterpart here.
  const ModelConfig& config = model_->config();
  if (!NodeProbes::enabled() || config.mtp_layers == 0 || config.mhc()) return;
  NodeProbes::RecordInputGradients(
      ReferenceProbeSite(state.microbatch, config.layers, config.layers, NodeKind::kAttn),
      {decoder_output});
}

void ReferenceEngine::WholeChunkForward(ChunkState* state, MicrobatchLosses* losses) {
  const GptWeights& w = model_->weights();
  const int64_t depths = model_->config().mtp_layers;
  // The shifted-token embeddings stay outside the checkpoint (as in Megatron's MTP layout);
  // they are inputs of the recomputed region.
  // The decoder sees the state as it enters the chunk, depth d the state after its roll: each
  // is kept by value for the replay, which runs after every roll.
  std::vector<ChunkState> states{*state};
  std::vector<at::Tensor> inputs{model_->Embed(state->input_ids)};
  for (int64_t d = 0; d < depths; ++d) {
    inputs.push_back(model_->MtpEmbedding(state));
    states.push_back(*state);
  }
  GptModel* model = model_;
  MicrobatchLosses* ls = losses;
  at::Tensor hidden = Checkpoint(
      [model, &w, states, ls, depths](const std::vector<at::Tensor>& in) {
        at::Tensor x = in[0];
        for (const LayerWeights& layer : w.layers) x = model->DecoderLayer(layer, x, states[0], ls);
        const DecoderOutput decoder = model->SplitDecoderOutput(x);
        model->ProbeDecoderOutput(decoder.main, states[0]);
        std::vector<at::Tensor> outputs{decoder.main};
        at::Tensor previous = decoder.mtp_input;
        for (int64_t d = 0; d < depths; ++d) {
          const MtpWeights& mtp = w.mtp[d];
          const ChunkState& st = states[static_cast<size_t>(d + 1)];
          at::Tensor y = model->MtpPrologue(mtp, in[1 + d], previous);
          outputs.push_back(
              model->ProbedMtpFinalNorm(mtp, model->DecoderLayer(mtp.layer, y, st, ls), st));
          previous = outputs.back();
        }
        return at::cat(outputs, 0);
      },
      inputs);
  std::vector<at::Tensor> chunks = hidden.chunk(1 + depths, 0);
  const std::vector<at::Tensor> mtp_hidden(chunks.begin() + 1, chunks.end());
  model_->ProbeMtpOutput(chunks[0], mtp_hidden, *state);
  model_->PostProcess(chunks[0], mtp_hidden, *state, losses);
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
    // By value: the MTP depths roll the caller's state before this segment's replay.
    hidden = Checkpoint(
        [model, &w, state, losses, first, count](const std::vector<at::Tensor>& in) {
          at::Tensor x = in[0];
          for (int64_t i = first; i < first + count; ++i) {
            x = model->DecoderLayer(w.layers[i], x, state, losses);
          }
          return x;
        },
        {hidden});
    l += count;
  }
  return hidden;
}

void ReferenceEngine::Forward(ChunkState* state, MicrobatchLosses* losses) {
  if (whole_chunk_) return WholeChunkForward(state, losses);
  const GptWeights& w = model_->weights();
  const int64_t layers = model_->config().layers;
  const DecoderOutput decoder =
      model_->SplitDecoderOutput(DecoderForward(model_->Embed(state->input_ids), *state, losses));
  model_->ProbeDecoderOutput(decoder.main, *state);
  const at::Tensor& hidden = decoder.main;

  // MTP depths, Megatron layout: the shifted embedding lookup outside the checkpoint, the
  // norms, projection, transformer layer and final norm inside it.
  std::vector<at::Tensor> mtp_hidden;
  at::Tensor previous = decoder.mtp_input;
  ProbeMtpInput(previous, *state);
  for (int64_t d = 0; d < model_->config().mtp_layers; ++d) {
    const MtpWeights& mtp = w.mtp[d];
    at::Tensor embedding = model_->MtpEmbedding(state);
    GptModel* model = model_;
    MicrobatchLosses* ls = losses;
    // The state after this depth's roll, by value: later depths roll it again.
    auto body = [model, &mtp, st = *state, ls](const std::vector<at::Tensor>& in) {
      at::Tensor x = model->MtpPrologue(mtp, in[0], in[1]);
      x = model->DecoderLayer(mtp.layer, x, st, ls);
      return model->ProbedMtpFinalNorm(mtp, x, st);
    };
    at::Tensor out = plan_.recomputed(layers + d) ? Checkpoint(body, {embedding, previous})
                                                  : body({embedding, previous});
    mtp_hidden.push_back(out);
    previous = out;
  }
  model_->ProbeMtpOutput(hidden, mtp_hidden, *state);
  model_->PostProcess(hidden, mtp_hidden, *state, losses);
}

std::vector<MicrobatchLosses> ReferenceEngine::RunIteration(std::vector<ChunkState>& microbatches) {
  if (pipeline_) return RunPipelined(microbatches);
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

std::vector<int64_t> ReferenceEngine::ActivationShape(int64_t index) const {
  const ModelConfig& c = model_->config();
  const PipelineLayout& pipeline = model_->layout().pipeline;
  return {micro_batch_ * pipeline.ActivationParts(index), c.seq_len,
          pipeline.ActivationWidth(index, c.hidden, c.residual_width())};
}

void ReferenceEngine::PostReceive(const ChunkPass& pass, bool gradient) {
  if (!pass.valid()) return;
  const ParallelLayout& layout = model_->layout();
  const PipelineStage& stage = layout.pipeline.stage(layout.pp_rank, pass.chunk);
  if (gradient ? stage.loss : stage.embedding) return;
  const PipelineStage& peer = layout.pipeline.stages[stage.index + (gradient ? 1 : -1)];
  const int64_t entering = stage.index + (gradient ? 1 : 0);  // the activation's stage
  posted_[{gradient, pass.chunk, pass.microbatch}] =
      channel_->Receive(ActivationShape(entering), model_->compute_dtype(), peer.pp_rank,
                        {gradient, stage.index, pass.microbatch});
}

at::Tensor ReferenceEngine::Received(const ChunkPass& pass, bool gradient) {
  const auto it = posted_.find({gradient, pass.chunk, pass.microbatch});
  if (it == posted_.end()) {
    throw std::logic_error("reference pipeline: no receive was posted for the " +
                           std::string(gradient ? "backward" : "forward") + " of chunk " +
                           std::to_string(pass.chunk) + ", microbatch " +
                           std::to_string(pass.microbatch));
  }
  at::Tensor received = it->second.Wait();
  posted_.erase(it);
  return received;
}

void ReferenceEngine::StepTransfers(const PipelineStep& step, const at::Tensor& output,
                                    const at::Tensor& input_grad, const PipelineStep* next,
                                    std::vector<PendingTransfer>* sends) {
  const ParallelLayout& layout = model_->layout();
  const std::vector<PipelineStage>& stages = layout.pipeline.stages;
  if (output.defined()) {
    const int64_t index = layout.pipeline.stage(layout.pp_rank, step.forward.chunk).index;
    channel_->Send(output, stages[index + 1].pp_rank, {false, index + 1, step.forward.microbatch},
                   sends);
  }
  if (next) PostReceive(next->forward, /*gradient=*/false);
  if (input_grad.defined()) {
    const int64_t index = layout.pipeline.stage(layout.pp_rank, step.backward.chunk).index;
    channel_->Send(input_grad, stages[index - 1].pp_rank,
                   {true, index - 1, step.backward.microbatch}, sends);
  }
  if (next) PostReceive(next->backward, /*gradient=*/true);
}

ReferenceEngine::ChunkPassState ReferenceEngine::ChunkForward(const PipelineStage& stage,
                                                              const ChunkState& microbatch,
                                                              MicrobatchLosses* losses) {
  ChunkPassState pass;
  pass.state = std::make_shared<ChunkState>(microbatch);
  ChunkState* state = pass.state.get();
  at::Tensor hidden;
  std::vector<at::Tensor> mtp_hidden;  // MTP hidden states made by an earlier stage
  if (stage.embedding) {
    hidden = model_->Embed(state->input_ids);
  } else {
    pass.input =
        Received({stage.chunk, state->microbatch}, /*gradient=*/false).requires_grad_(true);
    hidden = pass.input;
    const int64_t parts = pass.input.size(0) / micro_batch_;
    if (parts > 1) {
      std::vector<at::Tensor> stacked = hidden.chunk(parts, 0);
      hidden = stacked[0];
      mtp_hidden.assign(stacked.begin() + 1, stacked.end());
    }
  }

  NodeProbes::SetChunk(stage.chunk);
  hidden = DecoderLayers(stage, hidden, *state, losses);
  at::Tensor mtp_input = hidden;  // under mHC the decoder's streams, else its normed output
  if (stage.final_norm) {
    const DecoderOutput decoder = model_->SplitDecoderOutput(hidden);
    hidden = decoder.main;
    mtp_input = decoder.mtp_input;
    model_->ProbeDecoderOutput(hidden, *state);
  }

  if (stage.final_norm && stage.mtp_layers > 0) ProbeMtpInput(mtp_input, *state);
  MtpDepths(stage, mtp_input, state, losses, &mtp_hidden);
  if (stage.final_norm) model_->ProbeMtpOutput(hidden, mtp_hidden, *state);

  if (stage.loss) {
    model_->PostProcess(hidden, mtp_hidden, *state, losses);
    pass.output = losses->objective;
    return pass;
  }
  std::vector<at::Tensor> stacked{hidden};
  stacked.insert(stacked.end(), mtp_hidden.begin(), mtp_hidden.end());
  pass.output = stacked.size() == 1 ? hidden : at::cat(stacked, 0);
  return pass;
}

at::Tensor ReferenceEngine::DecoderLayers(const PipelineStage& stage, at::Tensor hidden,
                                          const ChunkState& state, MicrobatchLosses* losses) {
  const GptWeights& w = model_->weights();
  const RecomputePlan& plan = chunk_plans_[static_cast<size_t>(stage.chunk)];
  GptModel* model = model_;
  for (int64_t l = 0; l < stage.layers;) {
    const LayerSegment* segment = plan.SegmentStartingAt(l);
    const int64_t first = stage.first_layer + l;
    if (!segment) {
      hidden = model_->DecoderLayer(w.layers[first], hidden, state, losses);
      ++l;
      continue;
    }
    const int64_t count = segment->num_layers;
    // The state by value: the chunk's MTP depths roll it before this segment's replay.
    hidden = Checkpoint(
        [model, &w, st = state, losses, first, count](const std::vector<at::Tensor>& in) {
          at::Tensor x = in[0];
          for (int64_t i = first; i < first + count; ++i) {
            x = model->DecoderLayer(w.layers[i], x, st, losses);
          }
          return x;
        },
        {hidden});
    l += count;
  }
  return hidden;
}

void ReferenceEngine::MtpDepths(const PipelineStage& stage, const at::Tensor& hidden,
                                ChunkState* state, MicrobatchLosses* losses,
                                std::vector<at::Tensor>* mtp_hidden) {
  const GptWeights& w = model_->weights();
  const RecomputePlan& plan = chunk_plans_[static_cast<size_t>(stage.chunk)];
  GptModel* model = model_;
  at::Tensor previous = hidden;
  for (int64_t i = 0; i < stage.mtp_layers; ++i) {
    const MtpWeights& mtp = w.mtp[static_cast<size_t>(stage.first_mtp + i)];
    at::Tensor embedding = model_->MtpEmbedding(state);
    auto body = [model, &mtp, st = *state, losses](const std::vector<at::Tensor>& in) {
      at::Tensor x = model->MtpPrologue(mtp, in[0], in[1]);
      x = model->DecoderLayer(mtp.layer, x, st, losses);
      return model->ProbedMtpFinalNorm(mtp, x, st);
    };
    at::Tensor out = plan.recomputed(stage.layers + i) ? Checkpoint(body, {embedding, previous})
                                                       : body({embedding, previous});
    mtp_hidden->push_back(out);
    previous = out;
  }
}

at::Tensor ReferenceEngine::ChunkBackward(const PipelineStage& stage, int64_t microbatch,
                                          ChunkPassState* pass) {
  if (stage.loss) {
    at::Tensor seed = at::full({}, model_->loss_grad_scale(), pass->output.options());
    torch::autograd::backward({pass->output}, {seed});
  } else {
    const at::Tensor grad = Received({stage.chunk, microbatch}, /*gradient=*/true);
    torch::autograd::backward({pass->output}, {grad});
  }
  const at::Tensor input_grad = pass->input.defined() ? pass->input.grad() : at::Tensor();
  model_->parameters().FlushGradsToMainGrads();
  *pass = ChunkPassState();
  return input_grad;
}

std::vector<MicrobatchLosses> ReferenceEngine::RunPipelined(std::vector<ChunkState>& microbatches) {
  const ParallelLayout& layout = model_->layout();
  microbatches_ = static_cast<int64_t>(microbatches.size());
  micro_batch_ = microbatches.front().input_ids.size(0);
  const PipelineScheduleConfig config = PipelineScheduleConfig::Of(layout.pipeline, microbatches_);
  std::vector<MicrobatchLosses> losses(microbatches.size());
  std::map<std::pair<int64_t, int64_t>, ChunkPassState> live;  // (chunk, microbatch)
  std::vector<PendingTransfer> sends;
  const std::vector<PipelineStep> steps = PipelineSchedule(config, layout.pp_rank);
  if (!steps.empty()) {
    PostReceive(steps.front().forward, /*gradient=*/false);
    PostReceive(steps.front().backward, /*gradient=*/true);
  }
  for (size_t i = 0; i < steps.size(); ++i) {
    const PipelineStep& step = steps[i];
    // Sends whose bytes are through let go of their tensors.
    ReleaseCompletedSends(&sends);
    at::Tensor output, input_grad;
    if (step.forward.valid()) {
      const int64_t c = step.forward.chunk, m = step.forward.microbatch;
      const PipelineStage& stage = layout.pipeline.stage(layout.pp_rank, c);
      ChunkPassState& pass = live[{c, m}];
      pass = ChunkForward(stage, microbatches[static_cast<size_t>(m)],
                          &losses[static_cast<size_t>(m)]);
      if (!stage.loss) output = pass.output;
      MemoryTimeline::Mark("forward c" + std::to_string(c) + " mb" + std::to_string(m));
    }
    if (step.backward.valid()) {
      const int64_t c = step.backward.chunk, m = step.backward.microbatch;
      input_grad = ChunkBackward(layout.pipeline.stage(layout.pp_rank, c), m, &live[{c, m}]);
      live.erase({c, m});
      MemoryTimeline::Mark("backward c" + std::to_string(c) + " mb" + std::to_string(m));
    }
    StepTransfers(step, output, input_grad, i + 1 < steps.size() ? &steps[i + 1] : nullptr, &sends);
  }
  for (PendingTransfer& send : sends) send.Wait();
  if (!posted_.empty()) {
    throw std::logic_error("reference pipeline: " + std::to_string(posted_.size()) +
                           " receives posted and never taken");
  }
  for (MicrobatchLosses& l : losses) l.objective = at::Tensor();
  return losses;
}

}  // namespace bitparity

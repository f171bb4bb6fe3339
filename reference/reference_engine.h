#ifndef BITPARITY_REFERENCE_REFERENCE_ENGINE_H_
#define BITPARITY_REFERENCE_REFERENCE_ENGINE_H_

// The reference arm: the plain, non-overlapped step. Microbatches run F0 B0 F1 B1 ..., each
// forward as one autograd graph with Megatron-style full activation recompute (checkpointed
// layer groups per the recompute plan), each backward as one call, and each microbatch's
// gradients flushed into the fp32 main grads right after its backward.
//
// With pipeline parallelism each rank runs its model chunks in Megatron's (interleaved) 1F1B
// order (schedule/pipeline_schedule.h), a forward then a backward per steady step: a chunk's
// forward receives its input from the previous stage (or embeds the tokens), runs its layers under
// the recompute plan counted within the chunk (as Megatron's TransformerBlock counts it) and sends
// its output on (an MTP stage sends the main and MTP hidden states stacked along dim 0); its
// backward receives the output's gradient (or seeds the loss) and sends the input's gradient
// back. The transfers go in Megatron's order (comm/pipeline_channel.h): after each step's
// compute, the forward's send, the next step's forward receive, the backward's send, the next
// step's backward receive, as send_forward_backward_recv_forward_backward issues them.

#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "comm/communicator.h"
#include "comm/pipeline_channel.h"
#include "config/recompute_plan.h"
#include "model/engine.h"
#include "model/gpt.h"
#include "schedule/pipeline_layout.h"
#include "schedule/pipeline_schedule.h"

namespace bitparity {

class ReferenceEngine : public Engine {
 public:
  // `pipeline`: this rank's pipeline group when pp > 1, else null; `lanes`: how its transfers
  // are ordered (comm/pipeline_channel.h).
  ReferenceEngine(GptModel* model, const RecomputeConfig& recompute,
                  std::shared_ptr<Communicator> pipeline = nullptr,
                  PipelineLanes lanes = PipelineLanes::kPerKind);

  std::vector<MicrobatchLosses> RunIteration(std::vector<ChunkState>& microbatches) override;
  std::vector<std::string> warnings() const override { return plan_.warnings; }

  // One microbatch's forward into `losses`, which must outlive the backward (checkpoint replays
  // record aux losses into it).
  void Forward(ChunkState* state, MicrobatchLosses* losses);

 private:
  // The decoder layers under the recompute plan; the last layer's output, before the final norm.
  at::Tensor DecoderForward(const at::Tensor& embedded, const ChunkState& state,
                            MicrobatchLosses* losses);
  // Recompute unit "chunk": every decoder and MTP layer in one checkpoint.
  void WholeChunkForward(ChunkState* state, MicrobatchLosses* losses);
  // Node probes: the gradient of the decoder output the first MTP depth reads, as that depth's
  // attn input gradient (the overlap engine's record of the same key).
  void ProbeMtpInput(const at::Tensor& decoder_output, const ChunkState& state);

  // The pipeline path.
  std::vector<MicrobatchLosses> RunPipelined(std::vector<ChunkState>& microbatches);
  // A chunk's forward of one microbatch: returns the output (sent on) or, on the loss stage,
  // fills `losses`.
  struct ChunkPassState {
    std::shared_ptr<ChunkState> state;  // read again by checkpoint replays in the backward
    at::Tensor input;                   // the received input (a leaf), undefined on the first stage
    at::Tensor output;                  // what was sent on, or the objective on the loss stage
  };
  ChunkPassState ChunkForward(const PipelineStage& stage, const ChunkState& microbatch,
                              MicrobatchLosses* losses);
  // The stage's decoder layers on `hidden` under the chunk's recompute plan (a checkpoint per
  // segment, the other layers eager).
  at::Tensor DecoderLayers(const PipelineStage& stage, at::Tensor hidden, const ChunkState& state,
                           MicrobatchLosses* losses);
  // The stage's MTP depths after `hidden` (each its own checkpoint when recomputed), appended to
  // `mtp_hidden`; the depths roll `state`.
  void MtpDepths(const PipelineStage& stage, const at::Tensor& hidden, ChunkState* state,
                 MicrobatchLosses* losses, std::vector<at::Tensor>* mtp_hidden);
  // A chunk's backward of one microbatch; returns its input's gradient, to send back (undefined
  // on the first stage).
  at::Tensor ChunkBackward(const PipelineStage& stage, int64_t microbatch, ChunkPassState* pass);
  // Rows of the activation that enters stage `index`: micro_batch x (1 + MTP depths before it).
  std::vector<int64_t> ActivationShape(int64_t index) const;
  // One step's transfers in Megatron's order: `output` (a forward's, to the next stage) and
  // `input_grad` (a backward's, to the previous stage) sent, each followed by the receive its
  // kind of pass in `next` needs. Undefined tensors and invalid passes take no part.
  void StepTransfers(const PipelineStep& step, const at::Tensor& output,
                     const at::Tensor& input_grad, const PipelineStep* next,
                     std::vector<PendingTransfer>* sends);
  // Posts the receive `pass` needs for its forward (`gradient` false: the activation, unless its
  // stage is the first) or its backward (the output's gradient, unless it is the loss stage).
  void PostReceive(const ChunkPass& pass, bool gradient);
  // The tensor received for `pass`, which must have been posted.
  at::Tensor Received(const ChunkPass& pass, bool gradient);

  GptModel* model_;
  RecomputePlan plan_;
  bool whole_chunk_;
  std::shared_ptr<Communicator> pipeline_;
  std::unique_ptr<PipelineChannel> channel_;
  // Receives posted and not yet taken, by (gradient, chunk, microbatch).
  std::map<std::tuple<bool, int64_t, int64_t>, PendingPipelineReceive> posted_;
  std::vector<RecomputePlan> chunk_plans_;  // with a pipeline: each local chunk's, counted in it
  int64_t microbatches_ = 0;                // of this iteration
  int64_t micro_batch_ = 0;                 // samples per microbatch
};

}  // namespace bitparity

#endif  // BITPARITY_REFERENCE_REFERENCE_ENGINE_H_

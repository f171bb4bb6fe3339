#ifndef BITPARITY_REFERENCE_REFERENCE_ENGINE_H_
#define BITPARITY_REFERENCE_REFERENCE_ENGINE_H_

// The reference arm: the plain, non-overlapped step. Microbatches run F0 B0 F1 B1 ..., each
// forward as one autograd graph with Megatron-style full activation recompute (checkpointed
// layer groups per the recompute plan), each backward as one call, and each microbatch's
// gradients flushed into the fp32 main grads right after its backward.

#include <string>
#include <vector>

#include "core/recompute_plan.h"
#include "model/engine.h"
#include "model/gpt.h"

namespace bitparity {

class ReferenceEngine : public Engine {
 public:
  ReferenceEngine(GptModel* model, const RecomputeConfig& recompute);

  std::vector<MicrobatchLosses> RunIteration(std::vector<ChunkState>& microbatches) override;
  std::vector<std::string> warnings() const override { return plan_.warnings; }

  // One microbatch's forward into `losses`, which must outlive the backward (checkpoint replays
  // record aux losses into it).
  void Forward(ChunkState* state, MicrobatchLosses* losses);

 private:
  at::Tensor DecoderForward(const at::Tensor& embedded, const ChunkState& state,
                            MicrobatchLosses* losses);
  // Recompute unit "chunk": every decoder and MTP layer in one checkpoint.
  void WholeChunkForward(ChunkState* state, MicrobatchLosses* losses);

  GptModel* model_;
  RecomputePlan plan_;
  bool whole_chunk_;
};

}  // namespace bitparity

#endif  // BITPARITY_REFERENCE_REFERENCE_ENGINE_H_

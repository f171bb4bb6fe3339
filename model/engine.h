#ifndef BITPARITY_MODEL_ENGINE_H_
#define BITPARITY_MODEL_ENGINE_H_

// The contract between the training loop and an arm: run one iteration's forward and backward
// over this rank's microbatches.

#include <string>
#include <vector>

#include "model/gpt.h"

namespace bitparity {

class Engine {
 public:
  virtual ~Engine() = default;

  // Runs every microbatch forward and backward. On return each parameter's main grad has grown
  // by the sum of its per-microbatch gradients, flushed once per microbatch in microbatch order
  // (never per backward call), and `.grad` is empty. Returns one entry per microbatch.
  virtual std::vector<MicrobatchLosses> RunIteration(std::vector<ChunkState>& microbatches) = 0;

  // Notes for the run log, e.g. layers a recompute method leaves eager.
  virtual std::vector<std::string> warnings() const = 0;
};

}  // namespace bitparity

#endif  // BITPARITY_MODEL_ENGINE_H_

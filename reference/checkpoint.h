#ifndef BITPARITY_REFERENCE_CHECKPOINT_H_
#define BITPARITY_REFERENCE_CHECKPOINT_H_

// Full activation recompute for one region of the graph, with the semantics of Megatron's
// CheckpointFunction: the forward runs without building a graph and keeps only its inputs (no RNG
// state: dropout masks are keyed by their site, ops::Dropout, and nothing else draws); in backward
// the region is replayed with grad enabled from those inputs and backpropagated, and the gradients
// of the inputs are returned. LibTorch has no C++ checkpoint, so this is a hand-built autograd
// node.

#include <ATen/ATen.h>

#include <functional>
#include <vector>

namespace bitparity {

using CheckpointBody = std::function<at::Tensor(const std::vector<at::Tensor>& inputs)>;

// Returns body(inputs) attached to a recompute node. `body` must be replayable: given the same
// inputs it must produce the same output bits (it may run collectives, which
// every rank then replays at the same point of its backward).
at::Tensor Checkpoint(CheckpointBody body, const std::vector<at::Tensor>& inputs);

}  // namespace bitparity

#endif  // BITPARITY_REFERENCE_CHECKPOINT_H_

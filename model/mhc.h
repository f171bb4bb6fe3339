#ifndef BITPARITY_MODEL_MHC_H_
#define BITPARITY_MODEL_MHC_H_

// Manifold-constrained hyper-connections (mHC), with the numerics of Megatron-LM's
// hyper_connection.py: the residual stream widened to n streams ([b, s, n * h], stream-major
// within the last dimension). Around each sublayer F (attention, MLP) a learned mapping of the
// streams, scaled by r = 1 / (rms(x) + 1e-6), gives
//   H_pre  [n]     (sigmoid):         aggregates the streams into F's input,
//   H_post [n]     (2 * sigmoid):     expands F's output back onto the streams,
//   H_res  [n, n]  (Sinkhorn-Knopp, ending on the columns): mixes the streams,
// and the update is x_{l+1} = H_res x_l + H_post^T F(H_pre x_l). The mapping maths and its
// parameters are fp32 (Megatron's "keep hyper connection in fp32" intent); the mapping is applied
// in the streams' dtype, as Megatron applies it. The block entry replicates the embedding onto
// every stream; the block exit averages them (Megatron's output_contract).
//
// Every tensor these functions read more than twice reaches them through ops::Fanout, so that
// its gradient contributions are summed in a fixed order (docs/design.md, the rules of parity):
// the two arms cut the graph in different places, and the autograd engine's order would then
// differ.

#include <ATen/ATen.h>

#include <cstdint>

namespace bitparity {

// The parameters of one sublayer's mapping (fp32).
struct MhcWeights {
  at::Tensor mapping;     // [n * n + 2n, n * h], rows: pre, post, res
  at::Tensor alpha_pre;   // [1] gating of the pre logits
  at::Tensor alpha_post;  // [1]
  at::Tensor alpha_res;   // [1]
  at::Tensor bias;        // [n * n + 2n]

  bool defined() const { return mapping.defined(); }
};

// One sublayer's mapping for every token (fp32).
struct MhcMapping {
  at::Tensor pre;   // [b, s, n]
  at::Tensor post;  // [b, s, n]
  at::Tensor res;   // [b, s, n, n]; res[i][j] weighs stream j into stream i
};

// The mapping of `streams` [b, s, n * h] (read once).
MhcMapping ComputeMhcMapping(const at::Tensor& streams, const MhcWeights& weights, int64_t n,
                             int64_t sinkhorn_iterations);

// sum_i pre_i * stream_i in the streams' dtype: [b, s, h].
at::Tensor MhcAggregate(const at::Tensor& streams, const at::Tensor& pre, int64_t n);

// H_res streams + H_post^T output: the streams after a sublayer whose output is `output`
// [b, s, h], in the streams' dtype.
at::Tensor MhcUpdate(const at::Tensor& streams, const at::Tensor& output, const MhcMapping& mapping,
                     int64_t n);

// The block entry: `x` [b, s, h] copied onto n streams.
at::Tensor MhcExpand(const at::Tensor& x, int64_t n);

// The block exit: the mean of the streams, in their dtype ([b, s, h]).
at::Tensor MhcContract(const at::Tensor& streams, int64_t n);

}  // namespace bitparity

#endif  // BITPARITY_MODEL_MHC_H_

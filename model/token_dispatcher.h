#ifndef BITPARITY_MODEL_TOKEN_DISPATCHER_H_
#define BITPARITY_MODEL_TOKEN_DISPATCHER_H_

// How an MoE layer's tokens reach their experts across the EP group: one implementation per
// [model] dispatcher, made by TokenDispatcherFor (Megatron's MoEAlltoAllTokenDispatcher and
// MoEFlexTokenDispatcher are the models).
//   alltoall  one row per (token, chosen expert), sorted expert-major in token order; the
//             receiver regroups the (rank, expert) blocks expert-major and runs each expert on
//             its block.
//   flex      one row per (token, destination rank) with the rank's routing mask and
//             probabilities (DeepEP-style); the receiver expands each row to its local experts,
//             expert-major, and sums the expert outputs per row.
// Both order rows with stable counting sorts and sum in a fixed order, so their bits do not
// depend on the schedule; they route the same tokens to the same experts, so they agree on the
// loss up to the order of those sums.

#include <ATen/ATen.h>

#include "comm/communicator.h"
#include "comm/rank_context.h"
#include "config/recipe.h"
#include "model/moe.h"
#include "model/parameters.h"

namespace bitparity {

class TokenDispatcher {
 public:
  virtual ~TokenDispatcher() = default;

  // The rows this rank sends and their probabilities (and route mask) in sending order; fills
  // `plan` (splits, source tokens, received counts) and exchanges the split sizes with every rank
  // of `comm` (a small blocking all-to-all of counts).
  virtual DispatchPayload Permute(const at::Tensor& hidden, const RouterResult& routing,
                                  const ParallelLayout& layout, Communicator& comm,
                                  RoutingPlan* plan) const = 0;

  // This rank's experts applied to the received rows: one output row per received row, in
  // received order.
  virtual at::Tensor RunExperts(const DispatchPayload& received, const RoutingPlan& plan,
                                const MoeWeights& weights,
                                const PrecisionConfig& precision) const = 0;
};

// The dispatcher of `dispatcher`.
const TokenDispatcher& TokenDispatcherFor(Dispatcher dispatcher);

}  // namespace bitparity

#endif  // BITPARITY_MODEL_TOKEN_DISPATCHER_H_

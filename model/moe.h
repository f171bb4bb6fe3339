#ifndef BITPARITY_MODEL_MOE_H_
#define BITPARITY_MODEL_MOE_H_

// The mixture-of-experts path of a layer, split into the pieces the overlap arm schedules
// separately: routing and local permutation (compute), dispatch all-to-all (comm), experts
// (compute), combine all-to-all (comm), unpermutation (compute). Routing metadata lives in a
// RoutingPlan owned by one (layer, microbatch); nothing is shared across microbatches.

#include <ATen/ATen.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "comm/communicator.h"
#include "comm/rank_context.h"
#include "config/recipe.h"
#include "model/parameters.h"

namespace bitparity {

struct RouterResult {
  at::Tensor topk_experts;  // [T, k] int64, global expert ids
  at::Tensor topk_probs;    // [T, k] fp32, normalized over the k; carries the aux-loss gradient
  at::Tensor aux_loss;      // scalar fp32, already multiplied by aux_loss_coeff
};

// Top-k softmax router in fp32 with the Switch load-balancing loss
// E * coeff / (k * T^2) * sum_e (sum_t scores[t, e]) * tokens_routed_to(e).
// With grad enabled and `attach_aux_scaler`, the aux loss's gradient (aux_grad_scale) is injected
// through the returned probabilities (the only way that survives recompute).
// `padded` ([T] bool, true for a padding token; undefined: none) keeps padding tokens out of the
// loss as Megatron's router does (moe_utils.py compute_routing_scores_for_aux_loss,
// get_tokens_per_expert_and_token_count): their scores and routed counts are zeroed and T counts
// the other tokens. They are still routed and dispatched.
RouterResult Route(const at::Tensor& tokens, const at::Tensor& router_weight, int64_t topk,
                   double aux_loss_coeff, double aux_grad_scale, bool attach_aux_scaler = true,
                   const at::Tensor& padded = at::Tensor());

// Routing metadata of one MoE layer for one microbatch.
struct RoutingPlan {
  Dispatcher dispatcher = Dispatcher::kAllToAll;
  int64_t num_tokens = 0;
  int64_t experts_per_rank = 0;
  at::Tensor source_token;           // [rows sent] int64: local token carried by each sent row
  std::vector<int64_t> send_splits;  // rows sent to each rank
  std::vector<int64_t> recv_splits;  // rows received from each rank
  // alltoall: received rows arrive grouped by (source rank, local expert); the counts of those
  // groups, [ep * experts_per_rank], rank-major.
  std::vector<int64_t> received_per_rank_expert;
};

// The tensors one dispatch all-to-all moves; all share the plan's splits.
//   alltoall: tokens [R, h], probs [R] (one row per (token, chosen expert));
//   flex:     tokens [S, h], probs [S, experts_per_rank], route_mask [S, experts_per_rank] bool
//             (one row per (token, destination rank), DeepEP-style).
struct DispatchPayload {
  at::Tensor tokens;
  at::Tensor probs;
  at::Tensor route_mask;

  // As a schedule node's list of tensors: tokens and probs, the kWithGradient tensors that carry
  // gradients, then the routing mask where there is one (flex), which travels without.
  static constexpr size_t kWithGradient = 2;
  std::vector<at::Tensor> ToList() const {
    std::vector<at::Tensor> list{tokens, probs};
    if (route_mask.defined()) list.push_back(route_mask);
    return list;
  }
  static DispatchPayload FromList(const std::vector<at::Tensor>& list) {
    return {list.at(0), list.at(1), list.size() > kWithGradient ? list[2] : at::Tensor()};
  }
};

// Orders the local tokens for sending and exchanges the split sizes with every rank (a small
// blocking all-to-all of counts). Writes the plan of this (layer, microbatch) to `plan`.
DispatchPayload PermuteTokens(const at::Tensor& hidden, const RouterResult& routing,
                              const ParallelLayout& layout, Dispatcher dispatcher,
                              Communicator& comm, std::shared_ptr<const RoutingPlan>* plan);

// Runs this rank's experts on the received rows and returns one output row per received row,
// in received order (flex: already summed over the row's local experts).
at::Tensor RunExperts(const DispatchPayload& received, const RoutingPlan& plan,
                      const MoeWeights& weights, const PrecisionConfig& precision);

// Sums the returned rows back onto their tokens: [T, h].
at::Tensor UnpermuteTokens(const at::Tensor& rows, const RoutingPlan& plan);

// Differentiable all-to-all: forward moves rows by (send, recv), backward moves the gradient
// rows back by (recv, send). Blocking; used where comm need not overlap compute.
at::Tensor AllToAllWithGrad(const at::Tensor& input, Communicator* comm,
                            const std::vector<int64_t>& send_splits,
                            const std::vector<int64_t>& recv_splits);

}  // namespace bitparity

#endif  // BITPARITY_MODEL_MOE_H_

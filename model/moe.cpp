#include "model/moe.h"

#include <torch/torch.h>

#include <algorithm>
#include <numeric>

#include "model/ops.h"
#include "model/token_dispatcher.h"
#include "numerics/flop_count.h"

namespace bitparity {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

class AllToAllFunction : public torch::autograd::Function<AllToAllFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& input, int64_t comm_address,
                            std::vector<int64_t> send_splits, std::vector<int64_t> recv_splits) {
    auto* comm = reinterpret_cast<Communicator*>(comm_address);
    ctx->saved_data["comm"] = comm_address;
    ctx->saved_data["send"] = send_splits;
    ctx->saved_data["recv"] = recv_splits;
    return comm->AllToAll(input, send_splits, recv_splits);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto* comm = reinterpret_cast<Communicator*>(ctx->saved_data["comm"].toInt());
    std::vector<int64_t> send = ctx->saved_data["send"].toIntVector();
    std::vector<int64_t> recv = ctx->saved_data["recv"].toIntVector();
    at::Tensor grad_in = comm->AllToAll(grads[0].contiguous(), recv, send);
    return {grad_in, at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

RouterResult Route(const at::Tensor& tokens, const at::Tensor& router_weight, int64_t topk,
                   double aux_loss_coeff, double aux_grad_scale, bool attach_aux_scaler,
                   const at::Tensor& padded) {
  const int64_t num_tokens = tokens.size(0);
  const int64_t experts = router_weight.size(0);
  at::Tensor logits;
  {
    const at::Tensor router_input = tokens.to(at::kFloat);
    ops::CountLinearFlops(router_input, router_weight);
    logits = at::linear(router_input, router_weight);
  }
  at::Tensor scores = at::softmax(logits, -1);
  auto [values, indices] = at::topk(scores, topk, -1, /*largest=*/true, /*sorted=*/true);
  at::Tensor probs = values / values.sum(-1, /*keepdim=*/true);

  // The per-expert token counts of the tokens the loss counts are routing metadata, counted on
  // the host.
  at::Tensor routed = at::zeros({experts}, at::kFloat);
  int64_t counted_tokens = 0;
  {
    at::Tensor host_indices = indices.cpu();
    auto idx = host_indices.accessor<int64_t, 2>();
    const at::Tensor host_padded =
        padded.defined() ? padded.reshape({-1}).to(at::kBool).cpu().contiguous() : at::Tensor();
    const bool* is_padding = host_padded.defined() ? host_padded.data_ptr<bool>() : nullptr;
    float* counts = routed.data_ptr<float>();
    for (int64_t t = 0; t < num_tokens; ++t) {
      if (is_padding && is_padding[t]) continue;
      ++counted_tokens;
      for (int64_t j = 0; j < topk; ++j) counts[idx[t][j]] += 1.0f;
    }
  }
  // Padding tokens' scores zeroed (a mask multiply, as Megatron's), so that they carry no loss
  // and no gradient; without padding the scores as they are.
  const at::Tensor counted_scores =
      padded.defined()
          ? scores * padded.reshape({-1, 1}).logical_not().to(scores.device(), scores.dtype())
          : scores;
  const double denominator = static_cast<double>(std::max<int64_t>(counted_tokens, 1));
  const double factor = static_cast<double>(experts) * aux_loss_coeff /
                        (static_cast<double>(topk) * denominator * denominator);
  at::Tensor aux = (counted_scores.sum(0) * routed.to(scores.device())).sum() * factor;
  if (attach_aux_scaler && aux_loss_coeff > 0 && torch::GradMode::is_enabled()) {
    probs = ops::AttachAuxLoss(probs, aux, aux_grad_scale);
  }
  return {indices, probs, aux};
}

DispatchPayload PermuteTokens(const at::Tensor& hidden, const RouterResult& routing,
                              const ParallelLayout& layout, Dispatcher dispatcher,
                              Communicator& comm, std::shared_ptr<const RoutingPlan>* plan_out) {
  auto plan = std::make_shared<RoutingPlan>();
  plan->dispatcher = dispatcher;
  plan->num_tokens = hidden.size(0);
  plan->experts_per_rank = layout.experts_per_rank;
  DispatchPayload payload =
      TokenDispatcherFor(dispatcher).Permute(hidden, routing, layout, comm, plan.get());
  *plan_out = plan;
  return payload;
}

at::Tensor RunExperts(const DispatchPayload& received, const RoutingPlan& plan,
                      const MoeWeights& weights, const PrecisionConfig& precision) {
  return TokenDispatcherFor(plan.dispatcher).RunExperts(received, plan, weights, precision);
}

at::Tensor UnpermuteTokens(const at::Tensor& rows, const RoutingPlan& plan) {
  return at::zeros({plan.num_tokens, rows.size(1)}, rows.options())
      .index_add(0, plan.source_token, rows);
}

at::Tensor AllToAllWithGrad(const at::Tensor& input, Communicator* comm,
                            const std::vector<int64_t>& send_splits,
                            const std::vector<int64_t>& recv_splits) {
  return AllToAllFunction::apply(input, reinterpret_cast<int64_t>(comm), send_splits, recv_splits);
}

}  // namespace bitparity

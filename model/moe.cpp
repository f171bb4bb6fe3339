#include "model/moe.h"

#include <torch/torch.h>

#include <numeric>

#include "core/flop_count.h"
#include "model/ops.h"

namespace bitparity {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Index tensors are built on the host from routing metadata and placed next to the data they index.
at::Tensor IndexTensor(const std::vector<int64_t>& values, const at::Device& device) {
  at::Tensor t = at::tensor(values, at::kLong);
  return device.is_cpu() ? t : t.to(device);
}

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

// Applies expert i of `weights` to consecutive row blocks of `rows` with `counts[i]` rows each.
at::Tensor ApplyExpertsToBlocks(const at::Tensor& rows, const at::Tensor& probs,
                                const std::vector<int64_t>& counts, const MoeWeights& weights,
                                const PrecisionConfig& precision) {
  const GemmCategoryScope gemms(GemmCategory::kExpert);
  std::vector<at::Tensor> outputs;
  int64_t offset = 0;
  for (size_t e = 0; e < weights.local_experts.size(); ++e) {
    const int64_t n = counts[e];
    at::Tensor x = rows.narrow(0, offset, n);
    at::Tensor p = probs.narrow(0, offset, n);
    outputs.push_back(
        ops::SwiGlu(x, weights.local_experts[e].fc1, weights.local_experts[e].fc2, p, precision));
    offset += n;
  }
  return at::cat(outputs, 0);
}

}  // namespace

RouterResult Route(const at::Tensor& tokens, const at::Tensor& router_weight, int64_t topk,
                   double aux_loss_coeff, double aux_grad_scale, bool attach_aux_scaler) {
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

  // The per-expert token counts are routing metadata, counted on the host.
  at::Tensor routed = at::zeros({experts}, at::kFloat);
  {
    at::Tensor host_indices = indices.cpu();
    auto idx = host_indices.accessor<int64_t, 2>();
    float* counts = routed.data_ptr<float>();
    for (int64_t t = 0; t < num_tokens; ++t) {
      for (int64_t j = 0; j < topk; ++j) counts[idx[t][j]] += 1.0f;
    }
  }
  const double factor = static_cast<double>(experts) * aux_loss_coeff /
                        (static_cast<double>(topk) * num_tokens * num_tokens);
  at::Tensor aux = (scores.sum(0) * routed.to(scores.device())).sum() * factor;
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
  const int64_t T = hidden.size(0);
  const int64_t k = routing.topk_experts.size(1);
  const int64_t E = layout.experts;
  const int64_t ep = layout.ep_size;
  const int64_t local = layout.experts_per_rank;
  const at::Device device = hidden.device();
  at::Tensor host_experts = routing.topk_experts.cpu();
  auto idx = host_experts.accessor<int64_t, 2>();
  DispatchPayload payload;

  if (dispatcher == Dispatcher::kAllToAll) {
    // Stable counting sort of the (token, choice) pairs by expert: expert-major, token order.
    std::vector<int64_t> per_expert(static_cast<size_t>(E), 0);
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t j = 0; j < k; ++j) ++per_expert[static_cast<size_t>(idx[t][j])];
    }
    std::vector<int64_t> start(static_cast<size_t>(E), 0);
    for (int64_t e = 1; e < E; ++e) start[e] = start[e - 1] + per_expert[e - 1];
    std::vector<int64_t> order(static_cast<size_t>(T * k)), source(static_cast<size_t>(T * k));
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t j = 0; j < k; ++j) {
        int64_t pos = start[static_cast<size_t>(idx[t][j])]++;
        order[pos] = t * k + j;
        source[pos] = t;
      }
    }
    plan->source_token = IndexTensor(source, device);
    for (int64_t r = 0; r < ep; ++r) {
      plan->send_splits.push_back(std::accumulate(
          per_expert.begin() + r * local, per_expert.begin() + (r + 1) * local, int64_t{0}));
    }
    plan->received_per_rank_expert = comm.ExchangeCounts(per_expert, local);
    for (int64_t r = 0; r < ep; ++r) {
      auto first = plan->received_per_rank_expert.begin() + r * local;
      plan->recv_splits.push_back(std::accumulate(first, first + local, int64_t{0}));
    }
    payload.tokens = hidden.index_select(0, plan->source_token);
    payload.probs = routing.topk_probs.reshape({-1}).index_select(0, IndexTensor(order, device));
  } else {
    // One row per (destination rank, token), rank-major then token order.
    std::vector<int64_t> source, slot;
    std::vector<uint8_t> mask;
    std::vector<uint8_t> routed_here(static_cast<size_t>(local));
    for (int64_t r = 0; r < ep; ++r) {
      int64_t rows = 0;
      for (int64_t t = 0; t < T; ++t) {
        std::fill(routed_here.begin(), routed_here.end(), 0);
        bool any = false;
        for (int64_t j = 0; j < k; ++j) {
          int64_t e = idx[t][j];
          if (layout.ExpertOwner(e) == r) {
            routed_here[static_cast<size_t>(e - r * local)] = 1;
            any = true;
          }
        }
        if (!any) continue;
        source.push_back(t);
        slot.push_back(t * ep + r);
        mask.insert(mask.end(), routed_here.begin(), routed_here.end());
        ++rows;
      }
      plan->send_splits.push_back(rows);
    }
    plan->source_token = IndexTensor(source, device);
    plan->recv_splits = comm.ExchangeCounts(plan->send_splits, 1);
    // Dense per-expert probabilities of each token, regrouped per (token, rank).
    at::Tensor dense = at::zeros({T, E}, routing.topk_probs.options())
                           .scatter(1, routing.topk_experts, routing.topk_probs);
    payload.tokens = hidden.index_select(0, plan->source_token);
    payload.probs = dense.reshape({T * ep, local}).index_select(0, IndexTensor(slot, device));
    payload.route_mask =
        at::from_blob(mask.data(), {static_cast<int64_t>(source.size()), local}, at::kByte)
            .to(at::TensorOptions().dtype(at::kBool).device(device));
  }
  *plan_out = plan;
  return payload;
}

at::Tensor RunExperts(const DispatchPayload& received, const RoutingPlan& plan,
                      const MoeWeights& weights, const PrecisionConfig& precision) {
  const int64_t local = plan.experts_per_rank;
  const at::Device device = received.tokens.device();
  const int64_t ep = static_cast<int64_t>(plan.recv_splits.size());
  if (plan.dispatcher == Dispatcher::kAllToAll) {
    // Regroup the received (rank, expert) blocks expert-major: (expert, rank).
    const auto& counts = plan.received_per_rank_expert;
    std::vector<int64_t> block_start(counts.size(), 0);
    for (size_t i = 1; i < counts.size(); ++i) block_start[i] = block_start[i - 1] + counts[i - 1];
    std::vector<int64_t> order, per_expert(static_cast<size_t>(local), 0);
    for (int64_t e = 0; e < local; ++e) {
      for (int64_t r = 0; r < ep; ++r) {
        size_t b = static_cast<size_t>(r * local + e);
        for (int64_t i = 0; i < counts[b]; ++i) order.push_back(block_start[b] + i);
        per_expert[static_cast<size_t>(e)] += counts[b];
      }
    }
    std::vector<int64_t> inverse(order.size());
    for (size_t i = 0; i < order.size(); ++i)
      inverse[static_cast<size_t>(order[i])] = static_cast<int64_t>(i);
    at::Tensor order_t = IndexTensor(order, device);
    at::Tensor sorted = ApplyExpertsToBlocks(received.tokens.index_select(0, order_t),
                                             received.probs.index_select(0, order_t), per_expert,
                                             weights, precision);
    return sorted.index_select(0, IndexTensor(inverse, device));
  }
  // flex: expand each received row to its local experts, expert-major, then sum per row.
  const int64_t rows = received.tokens.size(0);
  at::Tensor mask = received.route_mask.cpu().contiguous();
  const bool* m = mask.data_ptr<bool>();
  std::vector<int64_t> expanded_rows, prob_index, per_expert(static_cast<size_t>(local), 0);
  for (int64_t e = 0; e < local; ++e) {
    for (int64_t r = 0; r < rows; ++r) {
      if (!m[r * local + e]) continue;
      expanded_rows.push_back(r);
      prob_index.push_back(r * local + e);
      ++per_expert[static_cast<size_t>(e)];
    }
  }
  at::Tensor rows_t = IndexTensor(expanded_rows, device);
  at::Tensor out = ApplyExpertsToBlocks(
      received.tokens.index_select(0, rows_t),
      received.probs.reshape({-1}).index_select(0, IndexTensor(prob_index, device)), per_expert,
      weights, precision);
  return at::zeros({rows, received.tokens.size(1)}, out.options()).index_add(0, rows_t, out);
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

#include "model/token_dispatcher.h"

#include <torch/torch.h>

#include <algorithm>
#include <numeric>
#include <stdexcept>
#include <vector>

#include "model/ops.h"
#include "numerics/flop_count.h"

namespace bitparity {
namespace {

// Index tensors are built on the host from routing metadata and placed next to the data they index.
at::Tensor IndexTensor(const std::vector<int64_t>& values, const at::Device& device) {
  at::Tensor t = at::tensor(values, at::kLong);
  return device.is_cpu() ? t : t.to(device);
}

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

// What both dispatchers read of one microbatch's routing: T tokens, k choices each, E experts
// over ep ranks of `local` each, and the chosen experts on the host.
struct RoutingShape {
  RoutingShape(const at::Tensor& hidden, const RouterResult& routing, const ParallelLayout& layout)
      : T(hidden.size(0)),
        k(routing.topk_experts.size(1)),
        E(layout.experts),
        ep(layout.ep_size),
        local(layout.experts_per_rank),
        device(hidden.device()),
        host_experts(routing.topk_experts.cpu()),
        experts(host_experts.accessor<int64_t, 2>()) {}
  int64_t T, k, E, ep, local;
  at::Device device;
  at::Tensor host_experts;                 // [T, k] int64
  at::TensorAccessor<int64_t, 2> experts;  // host_experts[t][j]: token t's j-th expert
};

class AllToAllTokenDispatcher : public TokenDispatcher {
 public:
  DispatchPayload Permute(const at::Tensor& hidden, const RouterResult& routing,
                          const ParallelLayout& layout, Communicator& comm,
                          RoutingPlan* plan) const override {
    const RoutingShape shape(hidden, routing, layout);
    DispatchPayload payload;
    // Stable counting sort of the (token, choice) pairs by expert: expert-major, token order.
    std::vector<int64_t> per_expert(static_cast<size_t>(shape.E), 0);
    for (int64_t t = 0; t < shape.T; ++t) {
      for (int64_t j = 0; j < shape.k; ++j) ++per_expert[static_cast<size_t>(shape.experts[t][j])];
    }
    std::vector<int64_t> start(static_cast<size_t>(shape.E), 0);
    for (int64_t e = 1; e < shape.E; ++e) start[e] = start[e - 1] + per_expert[e - 1];
    std::vector<int64_t> order(static_cast<size_t>(shape.T * shape.k)),
        source(static_cast<size_t>(shape.T * shape.k));
    for (int64_t t = 0; t < shape.T; ++t) {
      for (int64_t j = 0; j < shape.k; ++j) {
        int64_t pos = start[static_cast<size_t>(shape.experts[t][j])]++;
        order[pos] = t * shape.k + j;
        source[pos] = t;
      }
    }
    plan->source_token = IndexTensor(source, shape.device);
    for (int64_t r = 0; r < shape.ep; ++r) {
      plan->send_splits.push_back(std::accumulate(per_expert.begin() + r * shape.local,
                                                  per_expert.begin() + (r + 1) * shape.local,
                                                  int64_t{0}));
    }
    plan->received_per_rank_expert = comm.ExchangeCounts(per_expert, shape.local);
    for (int64_t r = 0; r < shape.ep; ++r) {
      auto first = plan->received_per_rank_expert.begin() + r * shape.local;
      plan->recv_splits.push_back(std::accumulate(first, first + shape.local, int64_t{0}));
    }
    payload.tokens = hidden.index_select(0, plan->source_token);
    payload.probs =
        routing.topk_probs.reshape({-1}).index_select(0, IndexTensor(order, shape.device));
    return payload;
  }

  at::Tensor RunExperts(const DispatchPayload& received, const RoutingPlan& plan,
                        const MoeWeights& weights,
                        const PrecisionConfig& precision) const override {
    const int64_t local = plan.experts_per_rank;
    const at::Device device = received.tokens.device();
    const int64_t ep = static_cast<int64_t>(plan.recv_splits.size());
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
};

class FlexTokenDispatcher : public TokenDispatcher {
 public:
  DispatchPayload Permute(const at::Tensor& hidden, const RouterResult& routing,
                          const ParallelLayout& layout, Communicator& comm,
                          RoutingPlan* plan) const override {
    const RoutingShape shape(hidden, routing, layout);
    DispatchPayload payload;
    // One row per (destination rank, token), rank-major then token order.
    std::vector<int64_t> source, slot;
    std::vector<uint8_t> mask;
    std::vector<uint8_t> routed_here(static_cast<size_t>(shape.local));
    for (int64_t r = 0; r < shape.ep; ++r) {
      int64_t rows = 0;
      for (int64_t t = 0; t < shape.T; ++t) {
        std::fill(routed_here.begin(), routed_here.end(), 0);
        bool any = false;
        for (int64_t j = 0; j < shape.k; ++j) {
          int64_t e = shape.experts[t][j];
          if (layout.ExpertOwner(e) == r) {
            routed_here[static_cast<size_t>(e - r * shape.local)] = 1;
            any = true;
          }
        }
        if (!any) continue;
        source.push_back(t);
        slot.push_back(t * shape.ep + r);
        mask.insert(mask.end(), routed_here.begin(), routed_here.end());
        ++rows;
      }
      plan->send_splits.push_back(rows);
    }
    plan->source_token = IndexTensor(source, shape.device);
    plan->recv_splits = comm.ExchangeCounts(plan->send_splits, 1);
    // Dense per-expert probabilities of each token, regrouped per (token, rank).
    at::Tensor dense = at::zeros({shape.T, shape.E}, routing.topk_probs.options())
                           .scatter(1, routing.topk_experts, routing.topk_probs);
    payload.tokens = hidden.index_select(0, plan->source_token);
    payload.probs = dense.reshape({shape.T * shape.ep, shape.local})
                        .index_select(0, IndexTensor(slot, shape.device));
    payload.route_mask =
        at::from_blob(mask.data(), {static_cast<int64_t>(source.size()), shape.local}, at::kByte)
            .to(at::TensorOptions().dtype(at::kBool).device(shape.device));
    return payload;
  }

  at::Tensor RunExperts(const DispatchPayload& received, const RoutingPlan& plan,
                        const MoeWeights& weights,
                        const PrecisionConfig& precision) const override {
    // flex: expand each received row to its local experts, expert-major, then sum per row.
    const int64_t rows = received.tokens.size(0);
    const int64_t local = plan.experts_per_rank;
    const at::Device device = received.tokens.device();
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
};

}  // namespace

const TokenDispatcher& TokenDispatcherFor(Dispatcher dispatcher) {
  static const AllToAllTokenDispatcher kAllToAll;
  static const FlexTokenDispatcher kFlex;
  switch (dispatcher) {
    case Dispatcher::kAllToAll:
      return kAllToAll;
    case Dispatcher::kFlex:
      return kFlex;
  }
  throw std::logic_error("TokenDispatcherFor: a Dispatcher without an implementation");
}

}  // namespace bitparity

#include "overlap_impl/stale_routing_fault.h"

#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/utils.h>
#include <torch/torch.h>

#include <string>
#include <utility>

namespace bitparity {
namespace {

using RoutingSlot = std::shared_ptr<const RoutingPlan>;

// The stale unpermutation's backward: the gradient rows gathered with the permutation the
// layer's slot holds when the backward runs. The slot belongs to the fault, which outlives every
// graph built from it.
class StaleUnpermuteBackward : public torch::autograd::Node {
 public:
  explicit StaleUnpermuteBackward(const RoutingSlot* slot) : slot_(slot) {}

  torch::autograd::variable_list apply(torch::autograd::variable_list&& grads) override {
    return {grads[0].index_select(0, (*slot_)->source_token)};
  }
  std::string name() const override { return "StaleUnpermuteBackward"; }

 private:
  const RoutingSlot* slot_;
};

}  // namespace

StaleRoutingFault::StaleRoutingFault(int64_t layers) : latest_(static_cast<size_t>(layers)) {}

void StaleRoutingFault::Built(int64_t layer, const std::shared_ptr<const RoutingPlan>& plan) {
  latest_.at(static_cast<size_t>(layer)) = plan;
}

at::Tensor StaleRoutingFault::Combine(const GptModel& model, const LayerWeights& layer,
                                      const at::Tensor& rows, const at::Tensor& residual,
                                      const RoutingPlan* plan, const ChunkState& state) const {
  if (plan == nullptr) return model.LayerCombine(layer, rows, residual, nullptr, state);
  const at::Tensor unpermuted = Unpermute(layer.index, rows);
  return model.LayerCombine(layer, unpermuted.view(residual.sizes()), residual, nullptr, state);
}

at::Tensor StaleRoutingFault::Unpermute(int64_t layer, const at::Tensor& rows) const {
  const RoutingSlot& slot = latest_.at(static_cast<size_t>(layer));
  at::Tensor out;
  {
    torch::NoGradGuard no_grad;
    out = UnpermuteTokens(rows, *slot);
  }
  if (rows.requires_grad()) {
    std::shared_ptr<StaleUnpermuteBackward> node(new StaleUnpermuteBackward(&slot),
                                                 torch::autograd::deleteNode);
    node->set_next_edges(torch::autograd::collect_next_edges(rows));
    torch::autograd::set_history(out, node);
  }
  return out;
}

}  // namespace bitparity

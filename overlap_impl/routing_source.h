#ifndef BITPARITY_OVERLAP_IMPL_ROUTING_SOURCE_H_
#define BITPARITY_OVERLAP_IMPL_ROUTING_SOURCE_H_

// Where a layer's combine finds the routing plan it unpermutes with. The schedule's own source,
// CarriedRouting, uses the plan of the (layer, microbatch) being combined, which its attn node
// built and the layer carries. The stale-routing fault (stale_routing_fault.h) replaces the
// source, not a line of the schedule: its plan is one per layer, shared by the microbatches.

#include <ATen/ATen.h>

#include <cstdint>
#include <memory>

#include "model/gpt.h"
#include "model/moe.h"

namespace bitparity {

class RoutingSource {
 public:
  virtual ~RoutingSource() = default;

  // The attn forward of `layer` built `plan` for the microbatch at hand.
  virtual void Built(int64_t layer, const std::shared_ptr<const RoutingPlan>& plan) = 0;

  // The combine of `rows` (the experts' outputs, back from the combine all-to-all) onto
  // `residual`, for the (layer, microbatch) whose routing is `plan` (null: a dense layer).
  virtual at::Tensor Combine(const GptModel& model, const LayerWeights& layer,
                             const at::Tensor& rows, const at::Tensor& residual,
                             const RoutingPlan* plan, const ChunkState& state) const = 0;
};

// The plan carried with the layer: what the schedule runs.
class CarriedRouting final : public RoutingSource {
 public:
  void Built(int64_t, const std::shared_ptr<const RoutingPlan>&) override {}
  at::Tensor Combine(const GptModel& model, const LayerWeights& layer, const at::Tensor& rows,
                     const at::Tensor& residual, const RoutingPlan* plan,
                     const ChunkState& state) const override {
    return model.LayerCombine(layer, rows, residual, plan, state);
  }
};

}  // namespace bitparity

#endif  // BITPARITY_OVERLAP_IMPL_ROUTING_SOURCE_H_

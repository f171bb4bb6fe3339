#ifndef BITPARITY_OVERLAP_IMPL_STALE_ROUTING_FAULT_H_
#define BITPARITY_OVERLAP_IMPL_STALE_ROUTING_FAULT_H_

// The silent bug of a token dispatcher shared by all microbatches (met while building the overlap
// path), re-created for OverlapBugs::stale_routing_metadata: each layer keeps one routing
// plan, the last one built by whichever microbatch ran its attn forward last, and the combine's
// unpermutation reads it when its backward runs, the way a shared dispatcher object reads its
// reversed_local_input_permutation_mapping. Silent with the alltoall dispatcher: every
// microbatch sends tokens x topk rows, so a later microbatch's permutation has the right shape
// and only the order is wrong.

#include <ATen/ATen.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "model/moe.h"
#include "overlap_impl/routing_source.h"

namespace bitparity {

class StaleRoutingFault final : public RoutingSource {
 public:
  explicit StaleRoutingFault(int64_t layers);

  // `plan` becomes the layer's one plan, as a shared dispatcher would hold it.
  void Built(int64_t layer, const std::shared_ptr<const RoutingPlan>& plan) override;

  // A MoE layer's combine unpermutes with Unpermute; a dense layer's is the schedule's own.
  at::Tensor Combine(const GptModel& model, const LayerWeights& layer, const at::Tensor& rows,
                     const at::Tensor& residual, const RoutingPlan* plan,
                     const ChunkState& state) const override;

  // The combine's unpermutation of `rows` with the layer's plan of now, whose backward reads the
  // layer's plan of when it runs: the other microbatch's, if its attn forward ran in between.
  at::Tensor Unpermute(int64_t layer, const at::Tensor& rows) const;

 private:
  std::vector<std::shared_ptr<const RoutingPlan>> latest_;  // per layer
};

}  // namespace bitparity

#endif  // BITPARITY_OVERLAP_IMPL_STALE_ROUTING_FAULT_H_

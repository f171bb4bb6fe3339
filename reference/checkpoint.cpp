#include "reference/checkpoint.h"

#include <torch/torch.h>

#include "core/memory.h"
#include "numerics/flop_count.h"
#include "trace/node_probes.h"

namespace bitparity {
namespace {

using torch::autograd::variable_list;

class CheckpointNode : public torch::autograd::Node {
 public:
  CheckpointNode(CheckpointBody body, std::vector<at::Tensor> inputs)
      : body_(std::move(body)), flop_counter_(FlopCounter::current()) {
    for (const at::Tensor& input : inputs) {
      requires_grad_.push_back(input.requires_grad());
      inputs_.push_back(input.detach());
    }
  }

  std::string name() const override { return "CheckpointBackward"; }

  variable_list apply(variable_list&& grads) override {
    // Every rank must replay (the body may hold collectives), so a missing gradient becomes 0.
    at::Tensor grad = grads[0].defined() ? grads[0] : input_metadata(0).zeros_like();
    std::vector<at::Tensor> leaves;
    for (size_t i = 0; i < inputs_.size(); ++i) {
      leaves.push_back(inputs_[i].detach().requires_grad_(requires_grad_[i]));
    }
    at::Tensor out;
    {
      torch::AutoGradMode enable(true);
      const ProbeReplayScope replay;                   // node probes of the body are replay records
      const FlopCounterScope counting(flop_counter_);  // the rank's, whichever thread this is
      const FlopReplayScope replay_flops;
      out = body_(leaves);
    }
    MemoryTimeline::Mark("checkpoint replay");
    torch::autograd::backward({out}, {grad});
    MemoryTimeline::Mark("checkpoint backward");
    variable_list result;
    for (const at::Tensor& leaf : leaves) result.push_back(leaf.grad());
    // A checkpoint is backpropagated once: release what it retained.
    inputs_.clear();
    body_ = nullptr;
    return result;
  }

 private:
  CheckpointBody body_;
  std::vector<at::Tensor> inputs_;
  std::vector<bool> requires_grad_;
  FlopCounter* flop_counter_;  // the rank's, when the forward ran
};

}  // namespace

at::Tensor Checkpoint(CheckpointBody body, const std::vector<at::Tensor>& inputs) {
  at::Tensor out;
  {
    torch::NoGradGuard no_grad;
    out = body(inputs);
  }
  bool any_requires_grad = false;
  for (const at::Tensor& input : inputs) any_requires_grad |= input.requires_grad();
  if (!any_requires_grad || !torch::GradMode::is_enabled()) return out;

  auto node = std::shared_ptr<CheckpointNode>(new CheckpointNode(std::move(body), inputs),
                                              torch::autograd::deleteNode);
  torch::autograd::edge_list edges;
  for (const at::Tensor& input : inputs) {
    edges.push_back(input.requires_grad() ? torch::autograd::impl::gradient_edge(input)
                                          : torch::autograd::Edge());
  }
  node->set_next_edges(std::move(edges));
  torch::autograd::create_gradient_edge(out, node);
  return out;
}

}  // namespace bitparity

#include "overlap_impl/schedule_node.h"

#include <torch/torch.h>

#include <stdexcept>

namespace bitparity {

const std::vector<at::Tensor>& ComputeNode::Forward(const std::vector<at::Tensor>& inputs,
                                                    const Body& body) {
  inputs_.clear();
  for (const at::Tensor& input : inputs) {
    if (!input.defined()) {
      inputs_.push_back(input);
      continue;
    }
    at::Tensor leaf = input.detach();
    if (input.requires_grad()) leaf.requires_grad_(true);
    inputs_.push_back(leaf);
  }
  side_originals_.clear();
  side_detached_.clear();
  if (forward_no_grad_) {
    torch::NoGradGuard no_grad;
    outputs_ = body(*this, inputs_);
  } else {
    torch::AutoGradMode grad(true);
    const ops::DelayWgradScope delayed(wgrad_sink_);
    outputs_ = body(*this, inputs_);
  }
  return outputs_;
}

at::Tensor ComputeNode::DetachSide(const at::Tensor& tensor) {
  at::Tensor leaf = tensor.detach();
  if (tensor.requires_grad()) leaf.requires_grad_(true);
  side_originals_.push_back(tensor);
  side_detached_.push_back(leaf);
  return leaf;
}

std::vector<at::Tensor> ComputeNode::Backward(const std::vector<at::Tensor>& output_grads) {
  if (inputs_.empty()) {
    throw std::logic_error(std::string("schedule node ") + ToString(node_) +
                           ": backward without a forward (its state was released)");
  }
  std::vector<at::Tensor> roots, grads;
  for (size_t i = 0; i < outputs_.size() && i < output_grads.size(); ++i) {
    if (outputs_[i].defined() && outputs_[i].requires_grad() && output_grads[i].defined()) {
      roots.push_back(outputs_[i]);
      grads.push_back(output_grads[i]);
    }
  }
  for (size_t i = 0; i < side_originals_.size(); ++i) {
    const at::Tensor& side_grad = side_detached_[i].grad();
    if (side_originals_[i].requires_grad() && side_grad.defined()) {
      roots.push_back(side_originals_[i]);
      grads.push_back(side_grad);
    }
  }
  if (!roots.empty()) torch::autograd::backward(roots, grads, /*retain_graph=*/keep_graph_);
  if (keep_graph_) kept_outputs_.insert(kept_outputs_.end(), outputs_.begin(), outputs_.end());
  std::vector<at::Tensor> input_grads;
  for (const at::Tensor& input : inputs_) {
    input_grads.push_back(input.defined() ? input.grad() : at::Tensor());
  }
  Release();
  return input_grads;
}

void ComputeNode::Release() {
  inputs_.clear();
  outputs_.clear();
  side_originals_.clear();
  side_detached_.clear();
}

bool ComputeNode::holds_tensors() const {
  return !inputs_.empty() || !outputs_.empty() || !side_originals_.empty() ||
         !side_detached_.empty() || !kept_outputs_.empty();
}

void AllToAllNode::Start(const std::vector<at::Tensor>& tensors, const std::vector<int64_t>& send,
                         const std::vector<int64_t>& recv) {
  pending_.clear();
  for (const at::Tensor& t : tensors) pending_.push_back(comm_->StartAllToAll(t, send, recv));
  timing_ = Timing();
  timing_.started_ns = pending_.empty() ? SteadyNanoseconds() : pending_.front().started_ns();
}

std::vector<at::Tensor> AllToAllNode::Finish() {
  timing_.wait_begin_ns = SteadyNanoseconds();
  std::vector<at::Tensor> out;
  for (PendingAllToAll& p : pending_) out.push_back(p.Wait());
  timing_.wait_end_ns = SteadyNanoseconds();
  timing_.completed_ns = 0;
  for (const PendingAllToAll& p : pending_) {
    timing_.completed_ns = std::max(timing_.completed_ns, p.completed_ns());
  }
  if (timing_.completed_ns == 0) timing_.completed_ns = timing_.wait_end_ns;
  pending_.clear();
  return out;
}

void AllToAllNode::StartForward(Communicator* comm, const std::vector<at::Tensor>& carried,
                                const std::vector<at::Tensor>& metadata,
                                std::vector<int64_t> send_splits,
                                std::vector<int64_t> recv_splits) {
  if (kind_ == Kind::kNull) {
    received_ = carried;
    received_.insert(received_.end(), metadata.begin(), metadata.end());
    backward_ = false;
    return;
  }
  comm_ = comm;
  send_splits_ = std::move(send_splits);
  recv_splits_ = std::move(recv_splits);
  carried_count_ = carried.size();
  carried_requires_grad_.clear();
  for (const at::Tensor& t : carried) carried_requires_grad_.push_back(t.requires_grad());
  std::vector<at::Tensor> all;
  for (const at::Tensor& t : carried) all.push_back(t.detach());
  all.insert(all.end(), metadata.begin(), metadata.end());
  backward_ = false;
  received_.clear();
  Start(all, send_splits_, recv_splits_);
}

const std::vector<at::Tensor>& AllToAllNode::FinishForward() {
  if (!pending_.empty() && !backward_) {
    received_ = Finish();
    // The received rows stand for the sent ones: they require grad when those did, so that
    // the consuming node returns their gradient for this node's backward.
    for (size_t i = 0; i < carried_count_; ++i) {
      if (carried_requires_grad_[i]) received_[i].requires_grad_(true);
    }
  }
  return received_;
}

void AllToAllNode::StartBackward(const std::vector<at::Tensor>& grads) {
  if (kind_ == Kind::kNull) {
    returned_grads_ = grads;
    received_.clear();
    backward_ = true;
    return;
  }
  FinishForward();
  std::vector<at::Tensor> moving;
  for (size_t i = 0; i < carried_count_; ++i) {
    const bool have = i < grads.size() && grads[i].defined();
    moving.push_back(have ? grads[i].contiguous() : at::zeros_like(received_[i]));
  }
  received_.clear();
  backward_ = true;
  Start(moving, recv_splits_, send_splits_);
}

void AllToAllNode::CompleteNow() {
  if (pending_.empty()) return;
  if (!backward_) {
    FinishForward();
    return;
  }
  returned_grads_ = Finish();
  completed_backward_ = true;
}

std::vector<at::Tensor> AllToAllNode::FinishBackward() {
  if (kind_ == Kind::kNull || completed_backward_) {
    completed_backward_ = false;
    std::vector<at::Tensor> grads;
    grads.swap(returned_grads_);
    return grads;
  }
  if (pending_.empty() || !backward_) return {};
  return Finish();
}

void AllToAllNode::Release() {
  for (PendingAllToAll& p : pending_) p.Wait();
  pending_.clear();
  completed_backward_ = false;
  received_.clear();
  returned_grads_.clear();
}

bool AllToAllNode::holds_tensors() const {
  return !pending_.empty() || !received_.empty() || !returned_grads_.empty();
}

}  // namespace bitparity

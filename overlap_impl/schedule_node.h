#ifndef BITPARITY_OVERLAP_IMPL_SCHEDULE_NODE_H_
#define BITPARITY_OVERLAP_IMPL_SCHEDULE_NODE_H_

// The units the combined 1F1B schedule interleaves (Megatron's ScheduleNode).
//
// A ComputeNode runs one forward piece on detached copies of its inputs (fresh autograd leaves
// that keep requires_grad), so its backward is its own autograd call and gradients travel to
// the previous node as explicit values. Side tensors the piece hands to other nodes are
// detached too, and their gradients are re-injected in this node's backward.
//
// An AllToAllNode moves tensors between ranks without autograd: forward starts the all-to-all
// and returns at once, the result is waited for only when it is needed; backward moves the
// gradients back the same way. A null AllToAllNode (a dense layer's moe_dispatch and
// moe_combine, Megatron's NoopScheduleNode) hands its tensors on unchanged and moves nothing,
// so that a dense layer runs the same operations as an MoE layer.

#include <ATen/ATen.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "model/ops.h"
#include "schedule/schedule_vocabulary.h"

namespace bitparity {

class ComputeNode {
 public:
  using Body = std::function<std::vector<at::Tensor>(ComputeNode& node,
                                                     const std::vector<at::Tensor>& inputs)>;

  explicit ComputeNode(NodeKind node) : node_(node) {}

  // Runs `body` on detached copies of `inputs`; without building a graph when
  // forward_no_grad() is set (the initial forward of a recompute segment).
  const std::vector<at::Tensor>& Forward(const std::vector<at::Tensor>& inputs, const Body& body);

  // Inside a body: detaches a tensor other nodes consume; its gradient (accumulated on the
  // returned leaf by their backward) flows back through this node's backward.
  at::Tensor DetachSide(const at::Tensor& tensor);

  // One autograd call over the outputs (with `output_grads`) and the side tensors (with the
  // gradients their consumers left on them). Returns the gradients of the inputs and releases
  // everything the node held.
  std::vector<at::Tensor> Backward(const std::vector<at::Tensor>& output_grads);

  void Release();
  bool holds_tensors() const;

  // Under a faulty plan's keep_graphs operation: the next backward keeps its graph,
  // and the node its outputs, until DropKeptGraph.
  void KeepGraphAfterBackward() { keep_graph_ = true; }
  void DropKeptGraph() {
    keep_graph_ = false;
    kept_outputs_.clear();
  }

  NodeKind node() const { return node_; }
  const std::vector<at::Tensor>& inputs() const { return inputs_; }
  const std::vector<at::Tensor>& outputs() const { return outputs_; }
  // Delayed weight gradients ([arms.NAME] delay_wgrad): the linear layers of every forward that
  // builds a graph here leave their weight gradients to `sink` (model/ops.h), which the schedule
  // runs later. nullptr (the default): computed in Backward.
  void set_wgrad_sink(ops::DelayedWgrads* sink) { wgrad_sink_ = sink; }

  bool forward_no_grad() const { return forward_no_grad_; }
  void set_forward_no_grad(bool value) { forward_no_grad_ = value; }

 private:
  NodeKind node_;
  bool forward_no_grad_ = false;
  ops::DelayedWgrads* wgrad_sink_ = nullptr;
  std::vector<at::Tensor> inputs_;
  std::vector<at::Tensor> outputs_;
  std::vector<at::Tensor> side_originals_;
  std::vector<at::Tensor> side_detached_;
  bool keep_graph_ = false;
  std::vector<at::Tensor> kept_outputs_;
};

class AllToAllNode {
 public:
  enum class Kind { kAllToAll, kNull };

  explicit AllToAllNode(NodeKind node, Kind kind = Kind::kAllToAll) : node_(node), kind_(kind) {}

  // Starts moving `carried` (tensors with gradients) and `metadata` (no gradients) by the
  // splits; rows [sum(send[0..j)), +send[j]) of each go to rank j.
  void StartForward(Communicator* comm, const std::vector<at::Tensor>& carried,
                    const std::vector<at::Tensor>& metadata, std::vector<int64_t> send_splits,
                    std::vector<int64_t> recv_splits);
  // The received tensors, carried first, then metadata; waits for them if needed.
  const std::vector<at::Tensor>& FinishForward();

  // Starts moving the gradients of the received carried tensors back (an undefined gradient
  // travels as zeros: every rank must take part in every all-to-all).
  void StartBackward(const std::vector<at::Tensor>& grads);
  // The gradients of the sent carried tensors; waits for them if needed.
  std::vector<at::Tensor> FinishBackward();

  // Waits for the started all-to-all now (a synchronous all-to-all, a faulty plan's); the next
  // FinishForward / FinishBackward returns what it received.
  void CompleteNow();

  void Release();
  bool holds_tensors() const;
  bool pending() const { return !pending_.empty(); }
  NodeKind node() const { return node_; }

  // Timing of the last all-to-all started by this node (steady-clock ns).
  struct Timing {
    int64_t started_ns = 0;
    int64_t completed_ns = 0;  // when the collective library finished it
    int64_t wait_begin_ns = 0;
    int64_t wait_end_ns = 0;
  };
  const Timing& last_timing() const { return timing_; }

 private:
  void Start(const std::vector<at::Tensor>& tensors, const std::vector<int64_t>& send,
             const std::vector<int64_t>& recv);
  std::vector<at::Tensor> Finish();

  NodeKind node_;
  Kind kind_;
  Communicator* comm_ = nullptr;
  std::vector<int64_t> send_splits_;
  std::vector<int64_t> recv_splits_;
  size_t carried_count_ = 0;
  std::vector<bool> carried_requires_grad_;
  std::vector<at::Tensor> received_;
  // A null node's backward, or a backward all-to-all that CompleteNow finished early.
  std::vector<at::Tensor> returned_grads_;
  bool completed_backward_ = false;
  std::vector<PendingAllToAll> pending_;
  bool backward_ = false;
  Timing timing_;
};

}  // namespace bitparity

#endif  // BITPARITY_OVERLAP_IMPL_SCHEDULE_NODE_H_

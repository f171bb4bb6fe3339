#ifndef BITPARITY_COMM_PIPELINE_CHANNEL_H_
#define BITPARITY_COMM_PIPELINE_CHANNEL_H_

// Pipeline transfers as Megatron makes them: matched in the order they were posted, not by a tag
// per (stage, microbatch). A receive therefore takes whatever its peer sent next on its lane; the
// two ranks' schedules alone decide what that is, so a schedule that posts a receive for the wrong
// (chunk, microbatch) gets another pass's tensor, as it would in Megatron.
//
// Lanes: each directed pair of ranks has two in-order lanes, one for activations and one for
// gradients. One lane per pair is not enough for the schedules as data: at pp = 2 both kinds
// travel between the same two ranks, and with a microbatch group larger than pp the sender's
// order of the two kinds is not the receiver's (rank 1 sends the activation of F0.3 before the
// gradient of B1.0; rank 0 runs B1.0 a step before F1.3). Megatron pairs its ranks' steps with
// an offset to keep one channel in order; here the kinds keep their own order, and within a kind
// every rank's table agrees with its peers'. The one-lane order stays as an injected fault
// (PipelineLanes::kOnePerPeer) that the labels below catch.
//
// Unlike Megatron, every transfer is preceded by a three-number label (kind, stage, microbatch),
// sent on the same channel, that the receiving end compares with what it expected: a receive
// matched to the wrong pass then fails at once, naming the rank, the pass it was posted for and
// the pass whose tensor arrived (an InfrastructureError: exit 3), instead of computing on
// another microbatch's numbers. The label travels as its own message over Gloo only: over NCCL
// reading it would stop the host at every receive, so there the parity checks are what catch a
// mismatched order.

#include <ATen/ATen.h>

#include <cstdint>
#include <string>
#include <vector>

#include "comm/communicator.h"

namespace bitparity {

// What one pipeline transfer carries: the activation entering stage `stage` for `microbatch`
// (forward), or the gradient of stage `stage`'s output (backward).
struct PipelinePayload {
  bool gradient = false;
  int64_t stage = 0;
  int64_t microbatch = 0;

  bool operator==(const PipelinePayload& o) const {
    return gradient == o.gradient && stage == o.stage && microbatch == o.microbatch;
  }
  // "the activation entering stage 3 for microbatch 2" / "the gradient of stage 2's output for
  // microbatch 5".
  std::string ToString() const;
};

// A receive that has been posted; Wait() checks the label (where one travels) and returns the
// tensor.
class PendingPipelineReceive {
 public:
  PendingPipelineReceive() = default;
  bool valid() const { return payload_.valid(); }
  // Throws InfrastructureError when the label that arrived is not the one expected (once the
  // payload that came with it has arrived too: nothing is left in flight).
  at::Tensor Wait();

 private:
  friend class PipelineChannel;
  PendingTransfer label_;  // Gloo only: the label sent ahead of the payload
  PendingTransfer payload_;
  PipelinePayload expected_;
  int64_t peer_ = -1;
  std::string context_;  // "pp rank 1" (who is receiving)
};

enum class PipelineLanes {
  kPerKind,    // activations and gradients each in order on their own lane
  kOnePerPeer  // the fault: both kinds on one in-order lane per pair of ranks
};

// The pipeline transfers of one rank, over its pipeline group `pipeline` (not owned; it must
// outlive the channel).
class PipelineChannel {
 public:
  explicit PipelineChannel(Communicator* pipeline, PipelineLanes lanes = PipelineLanes::kPerKind);

  // Starts sending `tensor` to pipeline rank `peer`; appends what is in flight (the label and the
  // tensor) to `sends`, which the caller waits for or releases.
  void Send(const at::Tensor& tensor, int64_t peer, const PipelinePayload& payload,
            std::vector<PendingTransfer>* sends);
  // Posts the receive of `payload` (of `shape` and `dtype`) from pipeline rank `peer`: the next
  // transfer that rank sends to this one.
  PendingPipelineReceive Receive(const std::vector<int64_t>& shape, at::ScalarType dtype,
                                 int64_t peer, const PipelinePayload& payload);

  // Whether transfers carry their label (Gloo transports).
  bool labelled() const { return labelled_; }

 private:
  // The tag of `payload`'s lane.
  int64_t Lane(const PipelinePayload& payload) const;

  Communicator* pipeline_;
  PipelineLanes lanes_;
  bool labelled_;
};

}  // namespace bitparity

#endif  // BITPARITY_COMM_PIPELINE_CHANNEL_H_

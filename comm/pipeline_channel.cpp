#include "comm/pipeline_channel.h"

#include <stdexcept>
#include <utility>

#include "core/errors.h"

namespace bitparity {

namespace {

// The lanes' tags: within a lane, matching is by order alone.
constexpr int64_t kActivationLane = 0;
constexpr int64_t kGradientLane = 1;

at::Tensor LabelTensor(const PipelinePayload& payload) {
  at::Tensor label = at::empty({3}, at::TensorOptions().dtype(at::kLong));
  int64_t* data = label.data_ptr<int64_t>();
  data[0] = payload.gradient ? 1 : 0;
  data[1] = payload.stage;
  data[2] = payload.microbatch;
  return label;
}

PipelinePayload PayloadOf(const at::Tensor& label) {
  const at::Tensor host = label.to(at::kCPU).contiguous();
  const int64_t* data = host.data_ptr<int64_t>();
  PipelinePayload payload;
  payload.gradient = data[0] != 0;
  payload.stage = data[1];
  payload.microbatch = data[2];
  return payload;
}

}  // namespace

std::string PipelinePayload::ToString() const {
  if (gradient) {
    return "the gradient of stage " + std::to_string(stage) + "'s output for microbatch " +
           std::to_string(microbatch);
  }
  return "the activation entering stage " + std::to_string(stage) + " for microbatch " +
         std::to_string(microbatch);
}

at::Tensor PendingPipelineReceive::Wait() {
  if (label_.valid()) {
    const PipelinePayload arrived = PayloadOf(label_.Wait());
    label_ = PendingTransfer();
    if (!(arrived == expected_)) {
      // The payload is drained first, so that no receive is left in flight behind the error.
      try {
        payload_.Wait();
      } catch (const std::exception&) {
        // Another pass's tensor may not fit this buffer; the mismatch below is the reason.
      }
      payload_ = PendingTransfer();
      throw InfrastructureError(context_ + ": the pipeline receive posted for " +
                                expected_.ToString() + " from pp rank " + std::to_string(peer_) +
                                " got " + arrived.ToString() +
                                ": the two ranks post their transfers in different orders");
    }
  }
  return payload_.Wait();
}

PipelineChannel::PipelineChannel(Communicator* pipeline, PipelineLanes lanes)
    : pipeline_(pipeline), lanes_(lanes), labelled_(pipeline->transport() != Transport::kNccl) {}

int64_t PipelineChannel::Lane(const PipelinePayload& payload) const {
  switch (lanes_) {
    case PipelineLanes::kPerKind:
      return payload.gradient ? kGradientLane : kActivationLane;
    case PipelineLanes::kOnePerPeer:
      return kActivationLane;
  }
  throw std::logic_error("pipeline channel: unknown lane policy");
}

void PipelineChannel::Send(const at::Tensor& tensor, int64_t peer, const PipelinePayload& payload,
                           std::vector<PendingTransfer>* sends) {
  const int64_t lane = Lane(payload);
  if (labelled_) sends->push_back(pipeline_->StartSend(LabelTensor(payload), peer, lane));
  sends->push_back(pipeline_->StartSend(tensor, peer, lane));
}

PendingPipelineReceive PipelineChannel::Receive(const std::vector<int64_t>& shape,
                                                at::ScalarType dtype, int64_t peer,
                                                const PipelinePayload& payload) {
  PendingPipelineReceive receive;
  const int64_t lane = Lane(payload);
  if (labelled_) receive.label_ = pipeline_->StartRecv({3}, at::kLong, peer, lane);
  receive.payload_ = pipeline_->StartRecv(shape, dtype, peer, lane);
  receive.expected_ = payload;
  receive.peer_ = peer;
  receive.context_ = "pp rank " + std::to_string(pipeline_->rank());
  return receive;
}

}  // namespace bitparity

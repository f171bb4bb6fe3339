#ifndef BITPARITY_CORE_CUDA_STREAMS_H_
#define BITPARITY_CORE_CUDA_STREAMS_H_

// The GPU pieces of the communicator: the NCCL process group, the compute and communication
// streams, and timing events, through LibTorch's own CUDA libraries (see core/cuda_support.h;
// without the GPU path every function throws InputError).

#include <ATen/ATen.h>
#include <c10/core/Event.h>
#include <c10/core/Stream.h>
#include <c10/util/intrusive_ptr.h>

#include <chrono>

namespace c10d {
class Backend;
class Store;
}  // namespace c10d

namespace bitparity {
namespace cuda {

// A c10d NCCL backend of `world` ranks bound to GPU `device` (connected eagerly, so that a
// failure shows at start-up). InfrastructureError when NCCL cannot start.
c10::intrusive_ptr<c10d::Backend> MakeNcclBackend(const c10::intrusive_ptr<c10d::Store>& store,
                                                  int rank, int world, int device,
                                                  std::chrono::milliseconds timeout);

// The current (compute) stream of GPU `device`, and a new high-priority stream from LibTorch's
// pool for communication (Megatron's comm stream).
c10::Stream ComputeStream(int device);
c10::Stream NewCommStream(int device);
// Tells the caching allocator that `tensor`'s memory is in use on `stream` until the work
// queued there now has finished (so that it is not handed out again too early).
void RecordStream(const at::Tensor& tensor, const c10::Stream& stream);
// An event that records time (c10::Event with timing on).
c10::Event TimingEvent();

}  // namespace cuda
}  // namespace bitparity

#endif  // BITPARITY_CORE_CUDA_STREAMS_H_

#ifndef BITPARITY_CORE_CUDA_NCCL_ALL_TO_ALL_H_
#define BITPARITY_CORE_CUDA_NCCL_ALL_TO_ALL_H_

// The GPU side of the expert-parallel all-to-all (built with -DBITPARITY_CUDA=ON): NCCL on a
// dedicated communication stream, ordered against the compute stream with events, so that an
// all-to-all of one microbatch runs while the compute stream works on the other (Megatron's
// comm stream). Start() returns at once; Wait() makes a consumer stream wait for the result.
//
// It works on device buffers and is independent of LibTorch: Debian's LibTorch is built
// without CUDA and without c10d's NCCL backend, so on such a build the model cannot run on a
// GPU and this layer is exercised by bitparity_nccl_check, where a GPU exists.

#include <cuda_runtime.h>
#include <nccl.h>

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

namespace bitparity {
namespace cuda {

// A key-value rendezvous (the c10d store in rank processes, a directory in the check).
struct Rendezvous {
  std::function<void(const std::string& key, const std::string& value)> set;
  std::function<std::string(const std::string& key)> get;  // blocks until the key exists
};

class NcclAllToAll {
 public:
  // Joins a world of `world` ranks on CUDA device `device`; rank 0 creates the NCCL id and
  // publishes it through `rendezvous`. `high_priority` puts the comm stream above compute.
  NcclAllToAll(int rank, int world, int device, const Rendezvous& rendezvous,
               bool high_priority = true);
  // One process driving every visible device (world = device count), for the check.
  static std::vector<NcclAllToAll*> CreateForAllDevices(int devices);
  ~NcclAllToAll();
  NcclAllToAll(const NcclAllToAll&) = delete;
  NcclAllToAll& operator=(const NcclAllToAll&) = delete;

  // Enqueues the exchange on the comm stream once `after` (a compute stream) has produced the
  // send buffer: bytes [sum(send[0..j)), +send[j]) go to rank j; received bytes land in rank
  // order. Returns an event recorded when the exchange is done. Nothing blocks the host.
  cudaEvent_t Start(const void* send, const std::vector<size_t>& send_bytes, void* recv,
                    const std::vector<size_t>& recv_bytes, cudaStream_t after);
  // Makes `consumer` wait (on the device) for an exchange started by Start().
  void Wait(cudaEvent_t done, cudaStream_t consumer);

  cudaStream_t comm_stream() const { return comm_stream_; }
  int rank() const { return rank_; }
  int world() const { return world_; }

 private:
  NcclAllToAll() = default;
  void CreateStream(bool high_priority);

  int rank_ = 0;
  int world_ = 1;
  int device_ = 0;
  ncclComm_t comm_ = nullptr;
  cudaStream_t comm_stream_ = nullptr;
  std::vector<cudaEvent_t> events_;  // owned, recycled by the destructor
};

// Throws std::runtime_error with the failing call and its message.
void CheckCuda(cudaError_t status, const char* what);
void CheckNccl(ncclResult_t status, const char* what);

}  // namespace cuda
}  // namespace bitparity

#endif  // BITPARITY_CORE_CUDA_NCCL_ALL_TO_ALL_H_

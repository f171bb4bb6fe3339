#include <cstring>
#include <stdexcept>

#include "core/cuda/nccl_all_to_all.h"

namespace bitparity {
namespace cuda {

void CheckCuda(cudaError_t status, const char* what) {
  if (status != cudaSuccess) {
    throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(status));
  }
}

void CheckNccl(ncclResult_t status, const char* what) {
  if (status != ncclSuccess) {
    throw std::runtime_error(std::string(what) + ": " + ncclGetErrorString(status));
  }
}

void NcclAllToAll::CreateStream(bool high_priority) {
  int least = 0, greatest = 0;
  CheckCuda(cudaDeviceGetStreamPriorityRange(&least, &greatest),
            "cudaDeviceGetStreamPriorityRange");
  CheckCuda(cudaStreamCreateWithPriority(&comm_stream_, cudaStreamNonBlocking,
                                         high_priority ? greatest : least),
            "cudaStreamCreateWithPriority");
}

NcclAllToAll::NcclAllToAll(int rank, int world, int device, const Rendezvous& rendezvous,
                           bool high_priority)
    : rank_(rank), world_(world), device_(device) {
  CheckCuda(cudaSetDevice(device), "cudaSetDevice");
  ncclUniqueId id;
  const std::string key = "bitparity/nccl_unique_id";
  if (rank == 0) {
    CheckNccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
    rendezvous.set(key, std::string(reinterpret_cast<const char*>(&id), sizeof(id)));
  } else {
    const std::string value = rendezvous.get(key);
    if (value.size() != sizeof(id)) throw std::runtime_error("NCCL id of the wrong size");
    std::memcpy(&id, value.data(), sizeof(id));
  }
  CheckNccl(ncclCommInitRank(&comm_, world, id, rank), "ncclCommInitRank");
  CreateStream(high_priority);
}

std::vector<NcclAllToAll*> NcclAllToAll::CreateForAllDevices(int devices) {
  std::vector<ncclComm_t> comms(static_cast<size_t>(devices));
  std::vector<int> ids(static_cast<size_t>(devices));
  for (int d = 0; d < devices; ++d) ids[d] = d;
  CheckNccl(ncclCommInitAll(comms.data(), devices, ids.data()), "ncclCommInitAll");
  std::vector<NcclAllToAll*> out;
  for (int d = 0; d < devices; ++d) {
    auto* a = new NcclAllToAll();
    a->rank_ = d;
    a->world_ = devices;
    a->device_ = d;
    a->comm_ = comms[d];
    CheckCuda(cudaSetDevice(d), "cudaSetDevice");
    a->CreateStream(true);
    out.push_back(a);
  }
  return out;
}

NcclAllToAll::~NcclAllToAll() {
  cudaSetDevice(device_);
  for (cudaEvent_t e : events_) cudaEventDestroy(e);
  if (comm_stream_) cudaStreamDestroy(comm_stream_);
  if (comm_) ncclCommDestroy(comm_);
}

cudaEvent_t NcclAllToAll::Start(const void* send, const std::vector<size_t>& send_bytes, void* recv,
                                const std::vector<size_t>& recv_bytes, cudaStream_t after) {
  if (static_cast<int>(send_bytes.size()) != world_ ||
      static_cast<int>(recv_bytes.size()) != world_) {
    throw std::runtime_error("all-to-all: one split per rank expected");
  }
  CheckCuda(cudaSetDevice(device_), "cudaSetDevice");
  // The comm stream starts only once the compute stream has produced the data.
  cudaEvent_t ready;
  CheckCuda(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming), "cudaEventCreate");
  events_.push_back(ready);
  CheckCuda(cudaEventRecord(ready, after), "cudaEventRecord");
  CheckCuda(cudaStreamWaitEvent(comm_stream_, ready, 0), "cudaStreamWaitEvent");
  const char* s = static_cast<const char*>(send);
  char* r = static_cast<char*>(recv);
  size_t send_offset = 0, recv_offset = 0;
  CheckNccl(ncclGroupStart(), "ncclGroupStart");
  for (int peer = 0; peer < world_; ++peer) {
    if (send_bytes[peer] > 0) {
      CheckNccl(ncclSend(s + send_offset, send_bytes[peer], ncclUint8, peer, comm_, comm_stream_),
                "ncclSend");
    }
    if (recv_bytes[peer] > 0) {
      CheckNccl(ncclRecv(r + recv_offset, recv_bytes[peer], ncclUint8, peer, comm_, comm_stream_),
                "ncclRecv");
    }
    send_offset += send_bytes[peer];
    recv_offset += recv_bytes[peer];
  }
  CheckNccl(ncclGroupEnd(), "ncclGroupEnd");
  cudaEvent_t done;
  CheckCuda(cudaEventCreateWithFlags(&done, cudaEventDisableTiming), "cudaEventCreate");
  events_.push_back(done);
  CheckCuda(cudaEventRecord(done, comm_stream_), "cudaEventRecord");
  return done;
}

void NcclAllToAll::Wait(cudaEvent_t done, cudaStream_t consumer) {
  CheckCuda(cudaSetDevice(device_), "cudaSetDevice");
  CheckCuda(cudaStreamWaitEvent(consumer, done, 0), "cudaStreamWaitEvent");
}

}  // namespace cuda
}  // namespace bitparity

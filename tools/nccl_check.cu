// bitparity_nccl_check: exercises the GPU all-to-all where a GPU exists (CUDA builds only).
// One process drives every visible device as one rank each; every rank sends rank-tagged bytes
// of uneven lengths (including zero) to every other, on the comm stream, while its compute
// stream fills the next buffer with a kernel; the received and the filled bytes must be exact.
// Exit 0 when they do, 1 when they do not, 3 when no GPU or NCCL is usable.

#include <cstdio>
#include <vector>

#include "core/cuda/nccl_all_to_all.h"

namespace {

// Bytes rank `from` sends to rank `to`: uneven, and zero between odd pairs.
size_t Bytes(int from, int to) { return ((from + to) % 2 == 1) ? 0 : 1024 * (1 + from + 2 * to); }

unsigned char Value(int from, int to, size_t i) {
  return static_cast<unsigned char>((from * 31 + to * 7 + i) & 0xFF);
}

// Compute-stream work enqueued while the exchange is in flight: fills the next send buffer.
__global__ void FillNext(unsigned char* next, size_t n, int rank) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    next[i] = static_cast<unsigned char>((rank + i) & 0xFF);
  }
}

}  // namespace

int main() {
  using bitparity::cuda::CheckCuda;
  using bitparity::cuda::CheckNccl;
  using bitparity::cuda::NcclAllToAll;
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::fprintf(stderr, "bitparity_nccl_check: no usable CUDA device\n");
    return 3;
  }
  try {
    std::vector<NcclAllToAll*> ranks = NcclAllToAll::CreateForAllDevices(devices);
    const int world = devices;
    constexpr size_t kNextBytes = 1 << 20;
    std::vector<void*> send(world), recv(world), next(world);
    std::vector<cudaStream_t> compute(world);
    std::vector<cudaEvent_t> done(world);
    for (int r = 0; r < world; ++r) {
      CheckCuda(cudaSetDevice(r), "cudaSetDevice");
      CheckCuda(cudaStreamCreate(&compute[r]), "cudaStreamCreate");
      std::vector<unsigned char> host;
      for (int to = 0; to < world; ++to) {
        for (size_t i = 0; i < Bytes(r, to); ++i) host.push_back(Value(r, to, i));
      }
      size_t in = 0;
      for (int from = 0; from < world; ++from) in += Bytes(from, r);
      CheckCuda(cudaMalloc(&send[r], host.size() + 1), "cudaMalloc");
      CheckCuda(cudaMalloc(&recv[r], in + 1), "cudaMalloc");
      CheckCuda(cudaMalloc(&next[r], kNextBytes), "cudaMalloc");
      CheckCuda(
          cudaMemcpyAsync(send[r], host.data(), host.size(), cudaMemcpyHostToDevice, compute[r]),
          "cudaMemcpyAsync");
      CheckCuda(cudaStreamSynchronize(compute[r]), "cudaStreamSynchronize");
    }
    CheckNccl(ncclGroupStart(), "ncclGroupStart");
    for (int r = 0; r < world; ++r) {
      std::vector<size_t> out_bytes, in_bytes;
      for (int peer = 0; peer < world; ++peer) {
        out_bytes.push_back(Bytes(r, peer));
        in_bytes.push_back(Bytes(peer, r));
      }
      done[r] = ranks[r]->Start(send[r], out_bytes, recv[r], in_bytes, compute[r]);
    }
    CheckNccl(ncclGroupEnd(), "ncclGroupEnd");
    // The compute streams go on working while the comm streams exchange.
    for (int r = 0; r < world; ++r) {
      CheckCuda(cudaSetDevice(r), "cudaSetDevice");
      FillNext<<<64, 256, 0, compute[r]>>>(static_cast<unsigned char*>(next[r]), kNextBytes, r);
      CheckCuda(cudaGetLastError(), "FillNext");
    }
    int bad = 0;
    for (int r = 0; r < world; ++r) {
      ranks[r]->Wait(done[r], compute[r]);
      CheckCuda(cudaStreamSynchronize(compute[r]), "cudaStreamSynchronize");
      size_t in = 0;
      for (int from = 0; from < world; ++from) in += Bytes(from, r);
      std::vector<unsigned char> host(in);
      CheckCuda(cudaMemcpy(host.data(), recv[r], in, cudaMemcpyDeviceToHost), "cudaMemcpy");
      size_t offset = 0;
      for (int from = 0; from < world; ++from) {
        for (size_t i = 0; i < Bytes(from, r); ++i) bad += host[offset + i] != Value(from, r, i);
        offset += Bytes(from, r);
      }
      std::vector<unsigned char> filled(kNextBytes);
      CheckCuda(cudaMemcpy(filled.data(), next[r], kNextBytes, cudaMemcpyDeviceToHost),
                "cudaMemcpy");
      for (size_t i = 0; i < kNextBytes; ++i)
        bad += filled[i] != static_cast<unsigned char>((r + i) & 0xFF);
      CheckCuda(cudaFree(send[r]), "cudaFree");
      CheckCuda(cudaFree(recv[r]), "cudaFree");
      CheckCuda(cudaFree(next[r]), "cudaFree");
    }
    for (NcclAllToAll* r : ranks) delete r;
    std::printf("bitparity_nccl_check: %d device(s), %s\n", world,
                bad ? "MISMATCH" : "all bytes exact");
    return bad ? 1 : 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bitparity_nccl_check: %s\n", e.what());
    return 3;
  }
}

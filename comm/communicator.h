#ifndef BITPARITY_COMM_COMMUNICATOR_H_
#define BITPARITY_COMM_COMMUNICATOR_H_

// The collectives the engines need, over a c10d process group, and the device the rank's tensors
// live on. Every operation is deterministic: all-to-all moves bytes without arithmetic, and sums
// over ranks are done by gathering and adding in rank order, identical on every rank.
//
// Transports:
//   gloo              CPU ranks: Gloo over TCP (loopback on one host).
//   nccl              GPU ranks, one GPU each: NCCL. An all-to-all runs on a communication
//                     stream; the compute stream waits for it (on the device, not the host) only
//                     when its result is consumed, so it runs under other compute.
//   gloo, host-staged GPU ranks sharing a GPU (NCCL refuses that): tensors are copied to the
//                     host, moved by Gloo, and copied back.
// Collectives take tensors on any device and return them on the device they came from.

#include <ATen/ATen.h>
#include <c10/util/intrusive_ptr.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <utility>
#include <vector>

#include "comm/rank_context.h"
#include "config/recipe.h"
#include "core/clock.h"

namespace c10d {
class Backend;
class Store;
}  // namespace c10d

namespace bitparity {

// Time spent in all-to-alls: in flight (start to completion) and exposed (the part of it in which
// the rank did not compute: on CPUs it staged, posted or waited for an all-to-all, each instant
// counted once however many were in flight). 1 - exposed / in flight is the share hidden under
// other work. On GPUs both come from CUDA events (the comm stream's start and end, the compute
// stream's wait).
// Point-to-point transfers between pipeline stages: how many, their bytes, and the time the
// caller spent waiting for them (a send waits for its bytes to leave, a receive for them to
// arrive).
struct TransferStats {
  int64_t count = 0, bytes = 0;
  double exposed_seconds = 0;
};

struct CommStats {
  double in_flight_seconds = 0, exposed_seconds = 0;
  int64_t count = 0;
  // Of the exposed time, the blocking exchanges of per-expert token counts (ExchangeCounts): host
  // wall time from the call to the counts' arrival, mostly waiting for the slowest rank to route;
  // and how many there were.
  double count_exchange_seconds = 0;
  int64_t count_exchanges = 0;
  TransferStats p2p;
};

enum class Transport { kLocal, kGloo, kNccl, kGlooHostStaged };

struct CudaExchange;  // the events of one GPU all-to-all (comm/communicator.cpp)
struct CommStream;    // a GPU rank's communication stream (comm/communicator.cpp)
class Communicator;

// An all-to-all that has been started; Wait() returns the received rows. Records when it was
// started and when the collective library finished it, so that callers can tell whether it
// completed under other work (host clock; on GPUs the host times are those of enqueueing).
class PendingAllToAll {
 public:
  PendingAllToAll() = default;
  at::Tensor Wait();
  bool valid() const { return output_.defined(); }

  // Steady-clock nanoseconds; completed_ns() is 0 until the collective has finished.
  int64_t started_ns() const { return started_ns_; }
  int64_t completed_ns() const { return completed_ns_ ? completed_ns_->load() : 0; }

 private:
  friend class Communicator;
  at::Tensor output_;         // what Wait() returns, on the caller's device
  at::Tensor staged_output_;  // host-staged: the host buffer Gloo receives into
  c10::intrusive_ptr<c10d::Work> work_;
  std::shared_ptr<CudaExchange> cuda_;
  bool waited_ = false;
  int64_t started_ns_ = 0;
  std::shared_ptr<std::atomic<int64_t>> completed_ns_;
  Communicator* owner_ = nullptr;
};

// A point-to-point transfer that has been started: a send (Wait() returns the sent tensor once
// its bytes are out) or a receive (Wait() returns the received tensor).
class PendingTransfer {
 public:
  PendingTransfer() = default;
  at::Tensor Wait();
  bool valid() const { return tensor_.defined(); }
  // Whether its bytes are through, without waiting.
  bool Completed() const;

 private:
  friend class Communicator;
  at::Tensor tensor_;  // sent or received, on the caller's device
  at::Tensor staged_;  // a receive through the host: the buffer Gloo receives into
  at::Tensor keep_;    // a send: the transport buffer, alive until the bytes are out
  c10::intrusive_ptr<c10d::Work> work_;  // NCCL: its wait() holds the compute stream, not the host
  bool waited_ = false;
  Communicator* owner_ = nullptr;
};

// Waits for the sends in `sends` that have completed, which frees what they kept alive (the sent
// tensor, its transport buffer), and drops them; the others stay in flight. Never blocks: the
// pipeline schedules call it between steps so that a sent activation lives no longer than its
// transfer.
void ReleaseCompletedSends(std::vector<PendingTransfer>* sends);

class Communicator {
 public:
  // Joins the process group of `context` on `device`. A CPU rank uses Gloo. A GPU rank takes GPU
  // LOCAL_RANK (modulo the GPUs it sees) and uses NCCL, or host-staged Gloo when ranks share a
  // GPU (every rank agrees through the store). A single rank needs no network at all. Throws
  // InputError when there is no GPU to take, InfrastructureError when the rendezvous fails
  // within `timeout`.
  static std::shared_ptr<Communicator> Connect(const RankContext& context, DeviceKind device,
                                               std::chrono::milliseconds timeout);
  static std::shared_ptr<Communicator> Connect(const RankContext& context,
                                               std::chrono::milliseconds timeout) {
    return Connect(context, DeviceKind::kCpu, timeout);
  }
  // Joins the process group of `context` through an existing store, whatever the world size: a
  // world of one rank gets a real process group too (how one GPU exercises NCCL). Connect() is a
  // TCP store at MASTER_ADDR:MASTER_PORT and this.
  static std::shared_ptr<Communicator> Join(const c10::intrusive_ptr<c10d::Store>& store,
                                            const RankContext& context, DeviceKind device,
                                            std::chrono::milliseconds timeout);
  // A communicator for a world of one rank (used by single-process tests).
  static std::shared_ptr<Communicator> Local(at::Device device = at::kCPU);

  ~Communicator();

  int64_t rank() const { return rank_; }
  int64_t world_size() const { return world_size_; }
  // Where this rank's tensors live (cpu, or cuda:N).
  const at::Device& device() const { return device_; }
  Transport transport() const { return transport_; }
  // The transport in words, e.g. "nccl" or "gloo, host-staged: ranks 0, 1 share GPU 0 ...".
  const std::string& transport_description() const { return transport_description_; }
  // One value every rank of this process group shares and no other run has: rank 0's process
  // mark (core/temporary_mark.h) and 64 random bits, handed to the others through the store.
  // `bitparity merge` refuses parts of different runs by it.
  const std::string& run_identity() const { return run_identity_; }

  // Starts an all-to-all along dim 0: rows [sum(send[0..j)), +send[j]) of `input` go to rank j;
  // the output holds recv[j] rows from each rank j, in rank order. bf16 travels over Gloo as fp16
  // bits and bool as bytes (Gloo supports neither), bit-exactly.
  PendingAllToAll StartAllToAll(const at::Tensor& input, const std::vector<int64_t>& send_splits,
                                const std::vector<int64_t>& recv_splits);
  at::Tensor AllToAll(const at::Tensor& input, const std::vector<int64_t>& send_splits,
                      const std::vector<int64_t>& recv_splits);
  // A blocking all-to-all of routing counts: counts[j] goes to rank j / per_rank; returns the
  // world_size * per_rank counts that arrived, in rank order. Timed apart in stats().
  std::vector<int64_t> ExchangeCounts(const std::vector<int64_t>& counts, int64_t per_rank);

  // Point-to-point: starts sending `tensor` to rank `peer` of this group under `tag`, or receiving
  // a tensor of `shape` and `dtype` from `peer` under `tag`. A receive matches the send of the
  // same (peer, tag); transfers of one (peer, tag) arrive in the order they were sent. Bytes move
  // without arithmetic (bf16 as fp16 bits over Gloo). Both ends must agree on shape and dtype.
  PendingTransfer StartSend(const at::Tensor& tensor, int64_t peer, int64_t tag);
  PendingTransfer StartRecv(const std::vector<int64_t>& shape, at::ScalarType dtype, int64_t peer,
                            int64_t tag);

  // A communicator over the ranks `members` of this one (ranks of this group, in the order they
  // take in the new group), e.g. the EP group of one pipeline stage or the pipeline group of one
  // EP rank. Every member calls it with the same `name` and `members`; `name` keeps the groups'
  // rendezvous keys apart. The calling rank must be a member.
  std::shared_ptr<Communicator> Subgroup(const std::string& name,
                                         const std::vector<int64_t>& members);

  // Every rank's `tensor` (same shape and dtype on all ranks), in rank order.
  std::vector<at::Tensor> AllGather(const at::Tensor& tensor);

  // The sum over ranks, accumulated as ((t0 + t1) + t2) + ... in the tensor's dtype; bitwise
  // identical on every rank and from run to run.
  at::Tensor AllReduceSumOrdered(const at::Tensor& tensor);

  void Barrier();

  // All-to-all time since the last ResetStats() (on GPUs this waits for the recorded events).
  const CommStats& stats();
  void ResetStats();

 private:
  friend class PendingAllToAll;
  friend class PendingTransfer;
  Communicator() = default;
  // Checks `peer`, runs `post` (which posts the transfer and returns its bytes), counts it, and
  // maps a failure to start to an InfrastructureError naming `what` and the peer.
  PendingTransfer StartTransfer(const char* what, int64_t peer,
                                const std::function<int64_t(PendingTransfer*)>& post);
  // The device collectives of this transport work on (cuda for NCCL, else cpu).
  at::Device transport_device() const;

  int64_t rank_ = 0;
  int64_t world_size_ = 1;
  at::Device device_ = at::kCPU;
  Transport transport_ = Transport::kLocal;
  std::string transport_description_ = "local";
  std::string run_identity_;
  c10::intrusive_ptr<c10d::Backend> group_;
  // What Subgroup() needs to join a new group: the store this group met through, this rank's
  // context and the timeout.
  c10::intrusive_ptr<c10d::Store> store_;
  RankContext context_;
  DeviceKind device_kind_ = DeviceKind::kCpu;
  std::chrono::milliseconds timeout_{0};
  CommStats stats_;
  // CPU all-to-alls since ResetStats(), as steady-clock intervals: each in flight (start to
  // completion), and each span this thread spent on one instead of computing (staging and
  // posting it, waiting for it). stats() measures their unions, so that exchanges in flight
  // together count once and an exchange hidden under the posting of another is not hidden.
  std::vector<std::pair<int64_t, int64_t>> in_flight_intervals_, exposed_intervals_;
  std::vector<std::shared_ptr<CudaExchange>> unresolved_;  // GPU exchanges not yet in stats_
  std::shared_ptr<CommStream> comm_stream_;                // NCCL: the communication stream
};

}  // namespace bitparity

#endif  // BITPARITY_COMM_COMMUNICATOR_H_

#ifndef BITPARITY_CORE_COMMUNICATOR_H_
#define BITPARITY_CORE_COMMUNICATOR_H_

// The collectives the engines need, over a c10d process group (Gloo over loopback on CPU).
// Every operation is deterministic: all-to-all moves bytes without arithmetic, and sums over
// ranks are done by gathering and adding in rank order, identical on every rank.

#include <ATen/ATen.h>
#include <c10/util/intrusive_ptr.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <vector>

#include "core/rank_context.h"

namespace c10d {
class Backend;
}  // namespace c10d

namespace bitparity {

// Time spent in all-to-alls: in flight (start to completion) and exposed (waiting for them).
// Their ratio says how much communication ran hidden under other work.
struct CommStats {
  double in_flight_seconds = 0;
  double exposed_seconds = 0;
  int64_t count = 0;
};

// An all-to-all that has been started; Wait() returns the received rows. Records when it was
// started and when the collective library finished it (on its own thread), so that callers can
// tell whether it completed under other work.
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
  at::Tensor output_;
  c10::intrusive_ptr<c10d::Work> work_;
  bool waited_ = false;
  int64_t started_ns_ = 0;
  std::shared_ptr<std::atomic<int64_t>> completed_ns_;
  CommStats* stats_ = nullptr;
};

// Steady-clock time in nanoseconds (the clock of PendingAllToAll's records).
int64_t SteadyNanoseconds();

class Communicator {
 public:
  // Joins the process group of `context`. A single rank needs no network at all. Throws
  // InfrastructureError when the rendezvous fails within `timeout`.
  static std::shared_ptr<Communicator> Connect(const RankContext& context,
                                               std::chrono::milliseconds timeout);
  // A communicator for a world of one rank (used by single-process tests).
  static std::shared_ptr<Communicator> Local();

  ~Communicator();

  int64_t rank() const { return rank_; }
  int64_t world_size() const { return world_size_; }

  // Starts an all-to-all along dim 0: rows [sum(send[0..j)), +send[j]) of `input` go to rank j;
  // the output holds recv[j] rows from each rank j, in rank order. bf16 travels as fp16 bits and
  // bool as bytes (Gloo supports neither), bit-exactly.
  PendingAllToAll StartAllToAll(const at::Tensor& input, const std::vector<int64_t>& send_splits,
                                const std::vector<int64_t>& recv_splits);
  at::Tensor AllToAll(const at::Tensor& input, const std::vector<int64_t>& send_splits,
                      const std::vector<int64_t>& recv_splits);

  // Every rank's `tensor` (same shape and dtype on all ranks), in rank order.
  std::vector<at::Tensor> AllGather(const at::Tensor& tensor);

  // The sum over ranks, accumulated as ((t0 + t1) + t2) + ... in the tensor's dtype; bitwise
  // identical on every rank and from run to run.
  at::Tensor AllReduceSumOrdered(const at::Tensor& tensor);

  void Barrier();

  // All-to-all time since the last ResetStats().
  const CommStats& stats() const { return stats_; }
  void ResetStats() { stats_ = CommStats(); }

 private:
  Communicator() = default;
  int64_t rank_ = 0;
  int64_t world_size_ = 1;
  c10::intrusive_ptr<c10d::Backend> group_;
  CommStats stats_;
};

}  // namespace bitparity

#endif  // BITPARITY_CORE_COMMUNICATOR_H_

#include "core/communicator.h"

#include <torch/torch.h>

#include <cstdlib>
#include <numeric>
#include <string>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "core/errors.h"

namespace bitparity {
namespace {

// Gloo lacks bf16 and bool: move their bits as fp16 and uint8 views.
at::Tensor TransportView(const at::Tensor& t) {
  if (t.scalar_type() == at::kBFloat16) return t.view(at::kHalf);
  if (t.scalar_type() == at::kBool) return t.view(at::kByte);
  return t;
}

void CheckSplits(const at::Tensor& t, const std::vector<int64_t>& splits, int64_t world,
                 const char* what) {
  if (static_cast<int64_t>(splits.size()) != world) {
    throw std::logic_error(std::string("all-to-all: ") + what + " splits have " +
                           std::to_string(splits.size()) + " entries for a world of " +
                           std::to_string(world));
  }
  int64_t total = std::accumulate(splits.begin(), splits.end(), int64_t{0});
  if (t.dim() == 0 || total != t.size(0)) {
    throw std::logic_error(std::string("all-to-all: ") + what + " splits sum to " +
                           std::to_string(total) + " but the tensor has " +
                           std::to_string(t.dim() ? t.size(0) : 0) + " rows");
  }
}

// The network device this rank's Gloo pairs bind to, chosen as torch.distributed does:
// GLOO_SOCKET_IFNAME names an interface; a loopback master means a single-host world, bound to
// loopback; otherwise the address this host's own name resolves to (never the master's
// address, which only the master's host can bind).
std::shared_ptr<::gloo::transport::Device> GlooDevice(const RankContext& context) {
  const char* ifname = std::getenv("GLOO_SOCKET_IFNAME");
  if (ifname != nullptr && *ifname != '\0') {
    std::string first = ifname;
    first = first.substr(0, first.find(','));
    return c10d::ProcessGroupGloo::createDeviceForInterface(first);
  }
  const std::string& addr = context.master_addr;
  if (addr.rfind("127.", 0) == 0 || addr == "localhost" || addr == "::1") {
    return c10d::ProcessGroupGloo::createDeviceForHostname(addr);
  }
  return c10d::ProcessGroupGloo::createDefaultDevice();
}

}  // namespace

int64_t SteadyNanoseconds() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

at::Tensor PendingAllToAll::Wait() {
  if (waited_) return output_;
  const int64_t wait_begin = SteadyNanoseconds();
  if (work_) {
    try {
      work_->wait();
    } catch (const std::exception& e) {
      throw InfrastructureError(std::string("all-to-all failed: ") + e.what());
    }
  }
  waited_ = true;
  if (stats_) {
    const int64_t now = SteadyNanoseconds();
    const int64_t completed = completed_ns() > 0 ? completed_ns() : now;
    stats_->in_flight_seconds += (completed - started_ns_) * 1e-9;
    stats_->exposed_seconds += (now - wait_begin) * 1e-9;
    ++stats_->count;
  }
  return output_;
}

std::shared_ptr<Communicator> Communicator::Local() {
  return std::shared_ptr<Communicator>(new Communicator());
}

std::shared_ptr<Communicator> Communicator::Connect(const RankContext& context,
                                                    std::chrono::milliseconds timeout) {
  std::shared_ptr<Communicator> comm(new Communicator());
  comm->rank_ = context.rank;
  comm->world_size_ = context.world_size;
  if (context.world_size == 1) return comm;
  try {
    c10d::TCPStoreOptions options;
    options.port = static_cast<uint16_t>(context.master_port);
    options.isServer = context.rank == 0 && !context.agent_store;
    options.numWorkers = static_cast<size_t>(context.world_size);
    options.waitWorkers = !context.agent_store;
    options.timeout = timeout;
    // Under torchrun the store is the agent's, shared with its own keys: bitparity's live under
    // a prefix of their own.
    c10::intrusive_ptr<c10d::Store> store = c10::make_intrusive<c10d::PrefixStore>(
        "bitparity", c10::make_intrusive<c10d::TCPStore>(context.master_addr, options));
    auto pg_options = c10d::ProcessGroupGloo::Options::create(timeout);
    pg_options->devices.push_back(GlooDevice(context));
    pg_options->threads = 2;
    comm->group_ = c10::make_intrusive<c10d::ProcessGroupGloo>(
        store, static_cast<int>(context.rank), static_cast<int>(context.world_size), pg_options);
  } catch (const std::exception& e) {
    throw InfrastructureError("rank " + std::to_string(context.rank) +
                              ": cannot join the process group at " + context.master_addr + ":" +
                              std::to_string(context.master_port) + ": " + e.what());
  }
  return comm;
}

Communicator::~Communicator() = default;

PendingAllToAll Communicator::StartAllToAll(const at::Tensor& input,
                                            const std::vector<int64_t>& send_splits,
                                            const std::vector<int64_t>& recv_splits) {
  CheckSplits(input, send_splits, world_size_, "send");
  std::vector<int64_t> out_shape = input.sizes().vec();
  out_shape[0] = std::accumulate(recv_splits.begin(), recv_splits.end(), int64_t{0});
  PendingAllToAll pending;
  pending.started_ns_ = SteadyNanoseconds();
  pending.completed_ns_ = std::make_shared<std::atomic<int64_t>>(0);
  pending.stats_ = &stats_;
  if (world_size_ == 1) {
    CheckSplits(input, recv_splits, 1, "receive");
    pending.output_ = input.clone(at::MemoryFormat::Contiguous);
    pending.completed_ns_->store(SteadyNanoseconds());
    return pending;
  }
  at::Tensor in = input.contiguous();
  pending.output_ = at::empty(out_shape, input.options());
  at::Tensor in_view = TransportView(in);
  at::Tensor out_view = TransportView(pending.output_);
  // alltoall_base moves from its split vectors: hand it copies.
  std::vector<int64_t> out_splits = recv_splits;
  std::vector<int64_t> in_splits = send_splits;
  try {
    pending.work_ = group_->alltoall_base(out_view, in_view, out_splits, in_splits);
    std::shared_ptr<std::atomic<int64_t>> completed = pending.completed_ns_;
    pending.work_->getFuture()->addCallback(
        [completed](c10::ivalue::Future&) { completed->store(SteadyNanoseconds()); });
  } catch (const std::exception& e) {
    throw InfrastructureError(std::string("all-to-all could not start: ") + e.what());
  }
  return pending;
}

at::Tensor Communicator::AllToAll(const at::Tensor& input, const std::vector<int64_t>& send_splits,
                                  const std::vector<int64_t>& recv_splits) {
  return StartAllToAll(input, send_splits, recv_splits).Wait();
}

std::vector<at::Tensor> Communicator::AllGather(const at::Tensor& tensor) {
  if (world_size_ == 1) return {tensor.clone()};
  at::Tensor in = TransportView(tensor.contiguous());
  std::vector<at::Tensor> inputs{in};
  std::vector<std::vector<at::Tensor>> outputs(1);
  for (int64_t r = 0; r < world_size_; ++r) outputs[0].push_back(at::empty_like(in));
  try {
    group_->allgather(outputs, inputs)->wait();
  } catch (const std::exception& e) {
    throw InfrastructureError(std::string("all-gather failed: ") + e.what());
  }
  std::vector<at::Tensor> result;
  for (at::Tensor& t : outputs[0]) result.push_back(t.view(tensor.scalar_type()));
  return result;
}

at::Tensor Communicator::AllReduceSumOrdered(const at::Tensor& tensor) {
  if (world_size_ == 1) return tensor.clone();
  std::vector<at::Tensor> parts = AllGather(tensor);
  at::Tensor sum = parts[0].clone();
  for (size_t r = 1; r < parts.size(); ++r) sum.add_(parts[r]);
  return sum;
}

void Communicator::Barrier() {
  if (world_size_ == 1) return;
  try {
    group_->barrier()->wait();
  } catch (const std::exception& e) {
    throw InfrastructureError(std::string("barrier failed: ") + e.what());
  }
}

}  // namespace bitparity

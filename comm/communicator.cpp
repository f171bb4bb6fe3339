#include "comm/communicator.h"

#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <numeric>
#include <optional>
#include <string>
#include <thread>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "comm/run_identity.h"
#include "core/cuda_streams.h"
#include "core/cuda_support.h"
#include "core/errors.h"

namespace bitparity {

// The communication stream of a GPU rank (Megatron's comm stream).
struct CommStream {
  c10::Stream stream;
};

// One GPU all-to-all: the comm stream's start and end, the compute stream's wait around the
// point where the result is consumed.
struct CudaExchange {
  c10::Event start = cuda::TimingEvent();
  c10::Event done = cuda::TimingEvent();
  c10::Event wait_begin = cuda::TimingEvent();
  c10::Event wait_end = cuda::TimingEvent();
  int device = 0;
};

namespace {

// Gloo lacks bf16 and bool: move their bits as fp16 and uint8 views.
at::Tensor TransportView(const at::Tensor& t) {
  if (t.scalar_type() == at::kBFloat16) return t.view(at::kHalf);
  if (t.scalar_type() == at::kBool) return t.view(at::kByte);
  return t;
}

// An exception's message without the C++ backtrace LibTorch appends to its own errors.
std::string MessageOf(const std::exception& e) {
  if (const auto* error = dynamic_cast<const c10::Error*>(&e)) {
    return error->what_without_backtrace();
  }
  return e.what();
}

// Waits for a collective's work; its failure (a peer gone, a timeout) is an infrastructure fault.
void WaitFor(c10d::Work& work, const char* what) {
  try {
    work.wait();
  } catch (const std::exception& e) {
    throw InfrastructureError(std::string(what) + " failed: " + MessageOf(e));
  }
}

// Ends the process with exit 3 when the rank group has not formed within its limit. The store's
// client retries its connection with a back-off that runs past the timeout it is given (a rank
// whose rank 0 never comes waited 13 s on a 6 s timeout), so the limit is kept here instead.
class FormationWatchdog {
 public:
  FormationWatchdog(std::chrono::milliseconds limit, std::string message)
      : thread_([this, limit, message = std::move(message)] {
          std::unique_lock<std::mutex> lock(mutex_);
          if (cv_.wait_for(lock, limit, [this] { return formed_; })) return;
          std::fprintf(stderr, "infrastructure error: %s\n", message.c_str());
          std::fflush(stderr);
          std::fflush(stdout);
          ::_exit(kExitInfrastructure);
        }) {}
  ~FormationWatchdog() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      formed_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  FormationWatchdog(const FormationWatchdog&) = delete;
  FormationWatchdog& operator=(const FormationWatchdog&) = delete;

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  bool formed_ = false;
  std::thread thread_;
};

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

c10::intrusive_ptr<c10d::Backend> MakeGloo(const c10::intrusive_ptr<c10d::Store>& store,
                                           const RankContext& context,
                                           std::chrono::milliseconds timeout) {
  auto options = c10d::ProcessGroupGloo::Options::create(timeout);
  options->devices.push_back(GlooDevice(context));
  options->threads = 2;
  return c10::make_intrusive<c10d::ProcessGroupGloo>(store, static_cast<int>(context.rank),
                                                     static_cast<int>(context.world_size), options);
}

// The ranks that share a GPU with another rank, in words ("" when every rank has its own):
// every rank publishes the UUID of its GPU and reads everyone's.
std::string SharedGpus(c10d::Store& store, const RankContext& context, const std::string& uuid) {
  store.set("gpu/" + std::to_string(context.rank), std::vector<uint8_t>(uuid.begin(), uuid.end()));
  std::map<std::string, std::vector<int64_t>> ranks_by_gpu;
  for (int64_t r = 0; r < context.world_size; ++r) {
    std::vector<uint8_t> value = store.get("gpu/" + std::to_string(r));
    ranks_by_gpu[std::string(value.begin(), value.end())].push_back(r);
  }
  std::string shared;
  for (const auto& [gpu, ranks] : ranks_by_gpu) {
    if (ranks.size() < 2) continue;
    std::string list;
    for (int64_t r : ranks) list += (list.empty() ? "" : ", ") + std::to_string(r);
    shared += std::string(shared.empty() ? "" : "; ") + "ranks " + list + " share GPU " +
              gpu.substr(0, 8);
  }
  return shared;
}

}  // namespace

at::Tensor PendingAllToAll::Wait() {
  if (waited_) return output_;
  const int64_t wait_begin = SteadyNanoseconds();
  if (cuda_) {
    // The compute stream waits for the exchange on the device; the host goes on.
    const c10::Stream compute = cuda::ComputeStream(cuda_->device);
    cuda_->wait_begin.record(compute);
    cuda_->done.block(compute);
    cuda_->wait_end.record(compute);
    owner_->unresolved_.push_back(cuda_);
  } else if (work_) {
    WaitFor(*work_, "all-to-all");
    if (staged_output_.defined()) output_.copy_(staged_output_);
  }
  waited_ = true;
  if (owner_ && !cuda_) {
    const int64_t now = SteadyNanoseconds();
    const int64_t completed = completed_ns() > 0 ? completed_ns() : now;
    owner_->in_flight_intervals_.emplace_back(started_ns_, completed);
    owner_->exposed_intervals_.emplace_back(wait_begin, now);
    ++owner_->stats_.count;
  }
  if (cuda_ && completed_ns_->load() == 0) completed_ns_->store(SteadyNanoseconds());
  return output_;
}

std::shared_ptr<Communicator> Communicator::Local(at::Device device) {
  std::shared_ptr<Communicator> comm(new Communicator());
  comm->device_ = device;
  return comm;
}

namespace {

// This rank's device: the CPU, or GPU LOCAL_RANK (modulo the GPUs it sees), made current.
at::Device BindDevice(const RankContext& context, DeviceKind device) {
  if (device == DeviceKind::kCpu) return at::kCPU;
  const int gpus = cuda::DeviceCount();
  if (gpus == 0) {
    throw InputError(std::string("[parallel] device = \"cuda\", but ") +
                     (cuda::Compiled() ? "this process sees no GPU"
                                       : "this build of bitparity has no GPU path") +
                     "; use device = \"cpu\"");
  }
  const int index = static_cast<int>(context.local_rank % gpus);
  cuda::SetDevice(index);
  return at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(index));
}

}  // namespace

std::shared_ptr<Communicator> Communicator::Connect(const RankContext& context, DeviceKind device,
                                                    std::chrono::milliseconds timeout) {
  if (context.world_size == 1) return Local(BindDevice(context, device));
  // The group forms within 1.25 times the collective timeout (75% of the recipe's timeout_s), or
  // this rank gives up: a rank started alone must not outwait its recipe, and the rest of the
  // recipe's timeout is the process's start-up (loading LibTorch takes about 0.5 s, more on a
  // loaded machine; at 90% a lone rank of a 5 s recipe ended at 4.3-5.0 s).
  const auto limit = timeout + timeout / 4;
  char seconds[32];
  std::snprintf(seconds, sizeof(seconds), "%.1f", static_cast<double>(limit.count()) / 1000.0);
  const FormationWatchdog watchdog(
      limit, "rank " + std::to_string(context.rank) + " of " + std::to_string(context.world_size) +
                 ": the rank group did not form within " + seconds + " s: no full world at " +
                 context.master_addr + ":" + std::to_string(context.master_port) +
                 " (start every rank with the same MASTER_ADDR and MASTER_PORT, or raise "
                 "[parallel] timeout_s)");
  c10::intrusive_ptr<c10d::Store> store;
  try {
    c10d::TCPStoreOptions options;
    options.port = static_cast<uint16_t>(context.master_port);
    options.isServer = context.rank == 0 && !context.agent_store;
    options.numWorkers = static_cast<size_t>(context.world_size);
    options.waitWorkers = !context.agent_store;
    options.timeout = timeout;
    // Under torchrun the store is the agent's, shared with its own keys: bitparity's live under
    // a prefix of their own.
    store = c10::make_intrusive<c10d::PrefixStore>(
        "bitparity", c10::make_intrusive<c10d::TCPStore>(context.master_addr, options));
  } catch (const std::exception& e) {
    throw InfrastructureError("rank " + std::to_string(context.rank) +
                              ": cannot reach the store at " + context.master_addr + ":" +
                              std::to_string(context.master_port) + ": " + MessageOf(e));
  }
  return Join(store, context, device, timeout);
}

std::shared_ptr<Communicator> Communicator::Join(const c10::intrusive_ptr<c10d::Store>& store,
                                                 const RankContext& context, DeviceKind device,
                                                 std::chrono::milliseconds timeout) {
  std::shared_ptr<Communicator> comm(new Communicator());
  comm->rank_ = context.rank;
  comm->world_size_ = context.world_size;
  comm->device_ = BindDevice(context, device);
  comm->store_ = store;
  comm->context_ = context;
  comm->device_kind_ = device;
  comm->timeout_ = timeout;
  try {
    comm->run_identity_ = ShareRunIdentity(*store, context);
    if (device == DeviceKind::kCpu) {
      comm->transport_ = Transport::kGloo;
      comm->transport_description_ = "gloo";
      comm->group_ = MakeGloo(store, context, timeout);
      return comm;
    }
    const std::string shared = SharedGpus(*store, context, cuda::Info(comm->device_.index()).uuid);
    if (shared.empty()) {
      comm->transport_ = Transport::kNccl;
      comm->transport_description_ = "nccl";
      comm->group_ = cuda::MakeNcclBackend(
          c10::make_intrusive<c10d::PrefixStore>("nccl", store), static_cast<int>(context.rank),
          static_cast<int>(context.world_size), comm->device_.index(), timeout);
      comm->comm_stream_ =
          std::make_shared<CommStream>(CommStream{cuda::NewCommStream(comm->device_.index())});
    } else {
      comm->transport_ = Transport::kGlooHostStaged;
      comm->transport_description_ =
          "gloo, host-staged: " + shared + " (NCCL needs one GPU per rank)";
      comm->group_ = MakeGloo(store, context, timeout);
    }
  } catch (const InputError&) {
    throw;
  } catch (const InfrastructureError&) {
    throw;
  } catch (const std::exception& e) {
    throw InfrastructureError("rank " + std::to_string(context.rank) +
                              ": cannot join the process group at " + context.master_addr + ":" +
                              std::to_string(context.master_port) + ": " + MessageOf(e));
  }
  return comm;
}

Communicator::~Communicator() {
  if (transport_ == Transport::kNccl && group_) {
    try {
      group_->shutdown();
    } catch (const std::exception&) {
      // A failed shutdown at exit changes nothing the trace holds.
    }
  }
}

at::Device Communicator::transport_device() const {
  return transport_ == Transport::kNccl ? device_ : at::Device(at::kCPU);
}

PendingAllToAll Communicator::StartAllToAll(const at::Tensor& input,
                                            const std::vector<int64_t>& send_splits,
                                            const std::vector<int64_t>& recv_splits) {
  CheckSplits(input, send_splits, world_size_, "send");
  std::vector<int64_t> out_shape = input.sizes().vec();
  out_shape[0] = std::accumulate(recv_splits.begin(), recv_splits.end(), int64_t{0});
  PendingAllToAll pending;
  pending.started_ns_ = SteadyNanoseconds();
  pending.completed_ns_ = std::make_shared<std::atomic<int64_t>>(0);
  pending.owner_ = this;
  if (!group_) {  // a world of one rank without a process group
    CheckSplits(input, recv_splits, 1, "receive");
    pending.output_ = input.clone(at::MemoryFormat::Contiguous);
    pending.completed_ns_->store(SteadyNanoseconds());
    return pending;
  }
  // alltoall_base moves from its split vectors: hand it copies.
  std::vector<int64_t> out_splits = recv_splits;
  std::vector<int64_t> in_splits = send_splits;
  try {
    if (transport_ == Transport::kNccl && input.device() == device_) {
      // On the comm stream, once the compute stream has produced the input.
      const c10::Stream compute = cuda::ComputeStream(device_.index());
      const c10::Stream& comm = comm_stream_->stream;
      at::Tensor in = input.contiguous();
      pending.output_ = at::empty(out_shape, input.options());
      auto exchange = std::make_shared<CudaExchange>();
      exchange->device = device_.index();
      c10::Event ready(c10::DeviceType::CUDA);
      ready.record(compute);
      ready.block(comm);
      exchange->start.record(comm);
      {
        c10::StreamGuard on_comm(comm);
        c10d::AllToAllOptions options;
        options.asyncOp = false;  // runs on the current stream: the comm stream
        group_->alltoall_base(pending.output_, in, out_splits, in_splits, options);
      }
      exchange->done.record(comm);
      cuda::RecordStream(in, comm);
      cuda::RecordStream(pending.output_, comm);
      pending.cuda_ = exchange;
      return pending;
    }
    // Gloo (or a tensor on another device than NCCL's): through the transport device.
    const bool staged = input.device() != transport_device();
    at::Tensor in = input.to(transport_device()).contiguous();
    at::Tensor out = at::empty(out_shape, in.options());
    pending.output_ = staged ? at::empty(out_shape, input.options()) : out;
    if (staged) pending.staged_output_ = out;
    at::Tensor in_view = TransportView(in);
    at::Tensor out_view = TransportView(out);
    pending.work_ = group_->alltoall_base(out_view, in_view, out_splits, in_splits);
    std::shared_ptr<std::atomic<int64_t>> completed = pending.completed_ns_;
    pending.work_->getFuture()->addCallback(
        [completed](c10::ivalue::Future&) { completed->store(SteadyNanoseconds()); });
    // Staging and posting the exchange keep this thread from computing: exposed, like the wait.
    exposed_intervals_.emplace_back(pending.started_ns_, SteadyNanoseconds());
  } catch (const std::exception& e) {
    throw InfrastructureError(std::string("all-to-all could not start: ") + MessageOf(e));
  }
  return pending;
}

std::shared_ptr<Communicator> Communicator::Subgroup(const std::string& name,
                                                     const std::vector<int64_t>& members) {
  const auto me = std::find(members.begin(), members.end(), rank_);
  if (me == members.end()) {
    throw std::logic_error("subgroup " + name + ": rank " + std::to_string(rank_) +
                           " is not among its members");
  }
  RankContext sub = context_;
  sub.rank = me - members.begin();
  sub.world_size = static_cast<int64_t>(members.size());
  if (!store_) {  // a world of one rank without a process group: so is every subgroup
    return Local(device_);
  }
  return Join(c10::make_intrusive<c10d::PrefixStore>("group/" + name, store_), sub, device_kind_,
              timeout_);
}

namespace {

void CheckPeer(int64_t peer, int64_t rank, int64_t world, const char* what) {
  if (peer < 0 || peer >= world || peer == rank) {
    throw std::logic_error(std::string("point-to-point ") + what + ": peer " +
                           std::to_string(peer) + " is not another rank of a group of " +
                           std::to_string(world) + " (this rank is " + std::to_string(rank) + ")");
  }
}

}  // namespace

PendingTransfer Communicator::StartTransfer(const char* what, int64_t peer,
                                            const std::function<int64_t(PendingTransfer*)>& post) {
  CheckPeer(peer, rank_, world_size_, what);
  PendingTransfer transfer;
  transfer.owner_ = this;
  try {
    stats_.p2p.bytes += post(&transfer);
    ++stats_.p2p.count;
  } catch (const std::exception& e) {
    throw InfrastructureError(std::string(what) + " with rank " + std::to_string(peer) +
                              " could not start: " + MessageOf(e));
  }
  return transfer;
}

PendingTransfer Communicator::StartSend(const at::Tensor& tensor, int64_t peer, int64_t tag) {
  return StartTransfer("send", peer, [&](PendingTransfer* transfer) {
    // NCCL: the send is queued behind the compute stream's work; Gloo: through the host.
    const bool gloo = transport_ != Transport::kNccl || tensor.device() != device_;
    at::Tensor in = tensor.to(gloo ? at::Device(at::kCPU) : device_).contiguous();
    if (gloo) in = TransportView(in);
    std::vector<at::Tensor> tensors{in};
    transfer->work_ = group_->send(tensors, static_cast<int>(peer), static_cast<int>(tag));
    transfer->tensor_ = tensor;
    transfer->keep_ = in;
    return static_cast<int64_t>(in.nbytes());
  });
}

PendingTransfer Communicator::StartRecv(const std::vector<int64_t>& shape, at::ScalarType dtype,
                                        int64_t peer, int64_t tag) {
  return StartTransfer("receive", peer, [&](PendingTransfer* transfer) {
    const bool gloo = transport_ != Transport::kNccl;
    at::Tensor buffer = at::empty(
        shape, at::TensorOptions().dtype(dtype).device(gloo ? at::Device(at::kCPU) : device_));
    std::vector<at::Tensor> tensors{gloo ? TransportView(buffer) : buffer};
    transfer->work_ = group_->recv(tensors, static_cast<int>(peer), static_cast<int>(tag));
    if (buffer.device() == device_) {
      transfer->tensor_ = buffer;
    } else {
      transfer->tensor_ = at::empty(shape, buffer.options().device(device_));
      transfer->staged_ = buffer;
    }
    return static_cast<int64_t>(buffer.nbytes());
  });
}

at::Tensor PendingTransfer::Wait() {
  if (waited_) return tensor_;
  const int64_t wait_begin = SteadyNanoseconds();
  WaitFor(*work_, "point-to-point transfer");
  if (staged_.defined()) tensor_.copy_(staged_);
  waited_ = true;
  keep_ = at::Tensor();
  staged_ = at::Tensor();
  work_.reset();
  if (owner_) owner_->stats_.p2p.exposed_seconds += (SteadyNanoseconds() - wait_begin) * 1e-9;
  return tensor_;
}

bool PendingTransfer::Completed() const { return waited_ || (work_ && work_->isCompleted()); }

void ReleaseCompletedSends(std::vector<PendingTransfer>* sends) {
  std::vector<PendingTransfer> in_flight;
  for (PendingTransfer& send : *sends) {
    if (send.Completed()) {
      send.Wait();
    } else {
      in_flight.push_back(std::move(send));
    }
  }
  *sends = std::move(in_flight);
}

at::Tensor Communicator::AllToAll(const at::Tensor& input, const std::vector<int64_t>& send_splits,
                                  const std::vector<int64_t>& recv_splits) {
  return StartAllToAll(input, send_splits, recv_splits).Wait();
}

std::vector<int64_t> Communicator::ExchangeCounts(const std::vector<int64_t>& counts,
                                                  int64_t per_rank) {
  const int64_t begin = SteadyNanoseconds();
  const std::vector<int64_t> splits(static_cast<size_t>(world_size_), per_rank);
  const at::Tensor received =
      AllToAll(at::tensor(counts, at::kLong), splits, splits).to(at::kCPU).contiguous();
  stats_.count_exchange_seconds += (SteadyNanoseconds() - begin) * 1e-9;
  ++stats_.count_exchanges;
  return std::vector<int64_t>(received.data_ptr<int64_t>(),
                              received.data_ptr<int64_t>() + received.numel());
}

std::vector<at::Tensor> Communicator::AllGather(const at::Tensor& tensor) {
  if (!group_) return {tensor.clone()};
  const bool gloo = transport_ != Transport::kNccl;
  at::Tensor in = tensor.to(transport_device()).contiguous();
  if (gloo) in = TransportView(in);
  std::vector<at::Tensor> inputs{in};
  std::vector<std::vector<at::Tensor>> outputs(1);
  for (int64_t r = 0; r < world_size_; ++r) outputs[0].push_back(at::empty_like(in));
  try {
    group_->allgather(outputs, inputs)->wait();
  } catch (const std::exception& e) {
    throw InfrastructureError(std::string("all-gather failed: ") + MessageOf(e));
  }
  std::vector<at::Tensor> result;
  for (at::Tensor& t : outputs[0]) {
    result.push_back(t.view(tensor.scalar_type()).to(tensor.device()));
  }
  return result;
}

at::Tensor Communicator::AllReduceSumOrdered(const at::Tensor& tensor) {
  if (!group_) return tensor.clone();
  std::vector<at::Tensor> parts = AllGather(tensor);
  at::Tensor sum = parts[0].clone();
  for (size_t r = 1; r < parts.size(); ++r) sum.add_(parts[r]);
  return sum;
}

void Communicator::Barrier() {
  if (!group_) return;
  try {
    group_->barrier()->wait();
  } catch (const std::exception& e) {
    throw InfrastructureError(std::string("barrier failed: ") + MessageOf(e));
  }
}

namespace {

// `intervals` sorted and merged into disjoint ones.
std::vector<std::pair<int64_t, int64_t>> Merged(
    std::vector<std::pair<int64_t, int64_t>> intervals) {
  std::sort(intervals.begin(), intervals.end());
  std::vector<std::pair<int64_t, int64_t>> merged;
  for (const auto& [begin, end] : intervals) {
    if (!merged.empty() && begin <= merged.back().second) {
      merged.back().second = std::max(merged.back().second, end);
    } else {
      merged.emplace_back(begin, end);
    }
  }
  return merged;
}

// The length of the intersection of two sets of disjoint sorted intervals.
int64_t OverlapLength(const std::vector<std::pair<int64_t, int64_t>>& a,
                      const std::vector<std::pair<int64_t, int64_t>>& b) {
  int64_t total = 0;
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    const int64_t begin = std::max(a[i].first, b[j].first);
    const int64_t end = std::min(a[i].second, b[j].second);
    if (end > begin) total += end - begin;
    if (a[i].second < b[j].second) {
      ++i;
    } else {
      ++j;
    }
  }
  return total;
}

}  // namespace

const CommStats& Communicator::stats() {
  if (!in_flight_intervals_.empty()) {
    const auto in_flight = Merged(in_flight_intervals_);
    int64_t in_flight_ns = 0;
    for (const auto& [begin, end] : in_flight) in_flight_ns += end - begin;
    stats_.in_flight_seconds = in_flight_ns * 1e-9;
    stats_.exposed_seconds = OverlapLength(in_flight, Merged(exposed_intervals_)) * 1e-9;
  }
  for (const std::shared_ptr<CudaExchange>& e : unresolved_) {
    e->wait_end.synchronize();
    stats_.in_flight_seconds += e->start.elapsedTime(e->done) * 1e-3;
    stats_.exposed_seconds += e->wait_begin.elapsedTime(e->wait_end) * 1e-3;
    ++stats_.count;
  }
  unresolved_.clear();
  return stats_;
}

void Communicator::ResetStats() {
  unresolved_.clear();
  in_flight_intervals_.clear();
  exposed_intervals_.clear();
  stats_ = CommStats();
}

}  // namespace bitparity

// Kernel benchmarks: all-to-all latency and bandwidth on loopback at the dispatchers' message
// sizes, the FP8 quantizers, the gradient digest and trace writing.

#include <arpa/inet.h>
#include <benchmark/benchmark.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <torch/torch.h>
#include <unistd.h>

#include <filesystem>
#include <mutex>
#include <thread>
#include <vector>

#include "comm/communicator.h"
#include "harness/launcher.h"
#include "numerics/fp8.h"
#include "numerics/random.h"
#include "trace/digest.h"
#include "trace/trace.h"

namespace bitparity {
namespace {

// Two Gloo ranks joined once, on two threads of this process.
std::vector<std::shared_ptr<Communicator>>& LoopbackWorld() {
  static std::vector<std::shared_ptr<Communicator>> world = [] {
    std::vector<std::shared_ptr<Communicator>> comms(2);
    const int port = FreeLoopbackPort();
    std::vector<std::thread> threads;
    for (int r = 0; r < 2; ++r) {
      threads.emplace_back([&, r] {
        RankContext context;
        context.rank = r;
        context.world_size = 2;
        context.master_port = port;
        comms[r] = Communicator::Connect(context, std::chrono::seconds(60));
      });
    }
    for (auto& t : threads) t.join();
    return comms;
  }();
  return world;
}

// One all-to-all of `rows` bf16 rows of `hidden` per rank, half of them to each rank; run by both
// benchmark threads (one per rank).
void BM_AllToAllLoopback(benchmark::State& state) {
  const int64_t rows = state.range(0), hidden = state.range(1);
  Communicator& comm = *LoopbackWorld()[state.thread_index()];
  at::Tensor rows_out = at::zeros({rows, hidden}, at::kBFloat16);
  const std::vector<int64_t> splits = {rows / 2, rows - rows / 2};
  for (auto _ : state) {
    at::Tensor received = comm.AllToAll(rows_out, splits, splits);
    benchmark::DoNotOptimize(received.data_ptr());
  }
  state.SetBytesProcessed(state.iterations() * rows * hidden * 2);
  state.counters["message_KiB"] = rows * hidden * 2 / 1024.0;
}
// Token rows of the default recipe's MoE layers (128 tokens x top-2, hidden 64), the memory
// recipe's (512 x 2, hidden 64), and larger messages for bandwidth.
BENCHMARK(BM_AllToAllLoopback)
    ->Args({256, 64})
    ->Args({1024, 64})
    ->Args({8192, 256})
    ->Args({65536, 256})
    ->Threads(2)
    ->UseRealTime();

void BM_Fp8QuantizeDequantize(benchmark::State& state) {
  const auto scaling = state.range(0) == 0 ? fp8::Scaling::kBlockwise : fp8::Scaling::kMx;
  const int64_t rows = 1024, cols = 1024;
  std::vector<float> source(rows * cols);
  Rng rng(1, "bench.fp8");
  for (float& v : source) v = static_cast<float>(rng.Normal());
  std::vector<float> data(source.size());
  const int64_t block = scaling == fp8::Scaling::kBlockwise ? 128 : 32;
  for (auto _ : state) {
    state.PauseTiming();
    data = source;
    state.ResumeTiming();
    fp8::QuantizeDequantize(data.data(), rows, cols, 1, block, scaling);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * rows * cols * 4);
  state.SetLabel(scaling == fp8::Scaling::kBlockwise ? "blockwise 1x128" : "mxfp8 1x32");
}
BENCHMARK(BM_Fp8QuantizeDequantize)->Arg(0)->Arg(1);

void BM_GradientDigest(benchmark::State& state) {
  std::vector<float> data(static_cast<size_t>(state.range(0)) / 4, 1.5f);
  for (auto _ : state) benchmark::DoNotOptimize(Digest(data.data(), data.size() * 4));
  state.SetBytesProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_GradientDigest)->Arg(1 << 20)->Arg(64 << 20);

void BM_TraceWrite(benchmark::State& state) {
  const int64_t params = 40, elements = state.range(0) / 4 / params;
  Trace trace;
  trace.attributes["world_size"] = "1";
  RankTrace rank;
  for (int64_t p = 0; p < params; ++p) {
    rank.param_names.push_back("p" + std::to_string(p));
    rank.param_shapes.push_back({elements});
  }
  IterationRecord record;
  record.iteration = 1;
  record.grad_digests.assign(params, 7);
  record.param_digests.assign(params, 9);
  rank.iterations.push_back(record);
  Rng rng(2, "bench.trace");
  for (int64_t p = 0; p < params; ++p) {
    TensorDump dump{rank.param_names[p], {elements}, std::vector<float>(elements)};
    for (float& v : dump.values) v = static_cast<float>(rng.Normal() * 1e-3);
    rank.grad_dumps[1].push_back(std::move(dump));
  }
  trace.ranks.push_back(std::move(rank));
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("bitparity_bench_" + std::to_string(::getpid()) + ".h5"))
                               .string();
  for (auto _ : state) WriteTrace(path, trace);
  std::filesystem::remove(path);
  state.SetBytesProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_TraceWrite)->Arg(16 << 20)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace bitparity

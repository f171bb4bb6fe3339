// The GEMM ceiling of this machine, measured rather than assumed: bf16 and fp32 GEMMs (x @ w^T,
// as a linear layer runs them) at the GEMM shapes of the default and perf recipes and at one large
// square shape, per intra-op thread count; bf16 both as LibTorch's own GEMM ("bf16", oneDNN) and
// on the pinned levels' path ("bf16_as_fp32": up-cast, one fp32 GEMM, rounded; model/gemm.h). The
// figure MFU is against comes from the same kind of measurement in each rank
// (numerics/gemm_throughput.h). The bench pins BITPARITY_BENCH_CPU_ISA (default avx2): oneDNN's
// bf16 GEMM is then capped at AVX2; BITPARITY_BENCH_CPU_ISA=native measures the host's best.
//
//   build/bitparity_bench --benchmark_filter=BM_Gemm --benchmark_repetitions=3

#include <ATen/Parallel.h>
#include <benchmark/benchmark.h>
#include <torch/torch.h>

#include <string>
#include <vector>

#include "config/recipe.h"
#include "model/gemm.h"

namespace bitparity {
namespace {

struct NamedGemm {
  std::string name;
  int64_t m, n, k;
};

// A recipe's linear-layer GEMMs for one microbatch on one rank; expert GEMMs at the mean rows a
// local expert receives (every EP rank's tokens times top-k, spread over the experts).
std::vector<NamedGemm> RecipeGemms(const std::string& recipe_name) {
  const Recipe r =
      LoadRecipe(std::string(BITPARITY_SOURCE_DIR) + "/recipes/" + recipe_name + ".toml");
  const ModelConfig& m = r.model;
  const int64_t tokens = r.train.micro_batch * m.seq_len;
  const int64_t expert_rows = m.experts > 0 ? tokens * m.topk * r.parallel.ep / m.experts : 0;
  std::vector<NamedGemm> gemms = {
      {recipe_name + "/qkv", tokens, 3 * m.hidden, m.hidden},
      {recipe_name + "/proj", tokens, m.hidden, m.hidden},
      {recipe_name + "/dense_fc1", tokens, 2 * m.ffn, m.hidden},
      {recipe_name + "/dense_fc2", tokens, m.hidden, m.ffn},
      {recipe_name + "/head", tokens, m.vocab, m.hidden},
  };
  if (expert_rows > 0) {
    gemms.push_back({recipe_name + "/expert_fc1", expert_rows, 2 * m.moe_ffn, m.hidden});
    gemms.push_back({recipe_name + "/expert_fc2", expert_rows, m.hidden, m.moe_ffn});
  }
  return gemms;
}

// `path` kNative: LibTorch's mm; kFp32Accumulate: the pinned levels' bf16 GEMM.
void RegisterGemm(const NamedGemm& g, at::ScalarType dtype, GemmPath path, int threads) {
  const std::string type = dtype == at::kFloat                 ? "fp32"
                           : path == GemmPath::kFp32Accumulate ? "bf16_as_fp32"
                                                               : "bf16";
  const std::string name = "BM_Gemm/" + type + "/" + g.name + "/" + std::to_string(g.m) + "x" +
                           std::to_string(g.n) + "x" + std::to_string(g.k) +
                           "/threads:" + std::to_string(threads);
  benchmark::RegisterBenchmark(
      name.c_str(),
      [g, dtype, path, threads](benchmark::State& state) {
        const int before = at::get_num_threads();
        at::set_num_threads(threads);
        const auto options = at::TensorOptions().dtype(dtype);
        const at::Tensor x =
            (at::arange(g.m * g.k).remainder(17) / 8.5 - 1.0).view({g.m, g.k}).to(options);
        const at::Tensor w =
            (at::arange(g.n * g.k).remainder(13) / 6.5 - 1.0).view({g.n, g.k}).to(options);
        at::Tensor y = at::empty({g.m, g.n}, options);
        const gemm::GemmKernel& kernel = gemm::KernelFor(path);
        for (auto _ : state) {
          if (path == GemmPath::kNative) {
            at::mm_out(y, x, w.t());
          } else {
            y = kernel.Multiply(x, w.t());
          }
          benchmark::DoNotOptimize(y.data_ptr());
        }
        at::set_num_threads(before);
        state.counters["GFLOP/s"] = benchmark::Counter(
            2.0 * g.m * g.n * g.k * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
      })
      ->Unit(benchmark::kMicrosecond)
      ->MinTime(0.2);
}

}  // namespace

// Called from the bench's main.
void RegisterGemmBenchmarks() {
  std::vector<NamedGemm> gemms = {{"square", 2048, 2048, 2048}};
  for (const char* recipe : {"perf", "default"}) {
    for (const NamedGemm& g : RecipeGemms(recipe)) gemms.push_back(g);
  }
  const std::pair<at::ScalarType, GemmPath> kinds[] = {{at::kBFloat16, GemmPath::kNative},
                                                       {at::kBFloat16, GemmPath::kFp32Accumulate},
                                                       {at::kFloat, GemmPath::kNative}};
  for (const auto& [dtype, path] : kinds) {
    for (int threads : {1, 2}) {
      for (const NamedGemm& g : gemms) RegisterGemm(g, dtype, path, threads);
    }
  }
}

}  // namespace bitparity

// Step time of every arm of the default, memory and perf recipes, each run as real rank processes
// (EP 2) through the launcher, on the CPU or (BITPARITY_BENCH_DEVICE=cuda) on GPUs. One
// benchmark iteration is one run of the arm: several training iterations, the first a warm-up,
// timed as the median step of the rest. Each BM_Step reports model TFLOP/s per rank and MFU
// (counted GEMM FLOPs over the step, against the best GEMM ceiling its ranks measured), the
// fraction of all-to-all time hidden under compute, the peak memory and the harness's own overhead
// (digests and dumps for the trace) as a fraction of the step. BM_StepRatio runs an arm and its
// baseline back to back within each repetition and reports the throughput ratio arm / baseline
// and the baseline's TFLOP/s and MFU (both runs against the best ceiling either measured); with
// --benchmark_repetitions Google Benchmark adds the median, mean, stddev and cv of every figure
// over the repetitions.
//
//   build/bitparity_bench --benchmark_filter=BM_Step --benchmark_repetitions=5
//       --benchmark_out=bench.json --benchmark_out_format=json   (one command line)

#include <benchmark/benchmark.h>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>

#include "config/recipe.h"
#include "config/recipe_edit.h"
#include "harness/checks.h"
#include "harness/launcher.h"
#include "harness/throughput.h"
#include "numerics/determinism.h"
#include "trace/trace.h"

namespace bitparity {
namespace {

namespace fs = std::filesystem;

struct StepFigures {
  double step_seconds = 0;  // median over iterations 2.., rank 0
  double hidden_fraction = 0;
  double record_fraction = 0;
  double peak_mib = 0;
  double tflops_per_rank = 0;           // model GEMM FLOPs per second per rank, over iterations 2..
  double hardware_tflops_per_rank = 0;  // with recompute replays
  double mfu = 0;
  double ceiling_tflops = 0;  // the GEMM ceiling the MFU is against (the best measured)
  Throughput throughput;      // what the rates come from
};

// Sets the rates of `f` from its throughput (after ShareBestCeiling, where several runs share).
void SetRates(StepFigures* f) {
  f->tflops_per_rank = f->throughput.model_flops_per_second_per_rank() / 1e12;
  f->hardware_tflops_per_rank = f->throughput.hardware_flops_per_second_per_rank() / 1e12;
  f->mfu = f->throughput.mfu();
  f->ceiling_tflops = 0;
  for (const RankThroughput& r : f->throughput.ranks) {
    f->ceiling_tflops = std::max(f->ceiling_tflops, r.ceiling_flops_per_second / 1e12);
  }
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// The device the step benchmarks run on: BITPARITY_BENCH_DEVICE ("cpu", the default, or "cuda").
std::string BenchDevice() {
  const char* device = std::getenv("BITPARITY_BENCH_DEVICE");
  return device != nullptr && *device != '\0' ? device : "cpu";
}

// The recipe's text with at least `iterations` iterations, no gradient dumps and the bench's
// device (and CPU level `cpu_isa`, unless empty), written next to the bench's traces (more steps
// for a stable median; dumps are not what is measured).
std::string WithIterations(const std::string& recipe, int64_t iterations, const fs::path& dir,
                           const std::string& cpu_isa = "") {
  const Recipe r = LoadRecipe(recipe);
  const std::string path = (dir / fs::path(recipe).filename()).string();
  std::vector<RecipeEdit> edits = {{"train.iterations", std::max(r.train.iterations, iterations)},
                                   {"trace.dump_grads_at", std::monostate()},
                                   {"parallel.device", BenchDevice()}};
  if (!cpu_isa.empty()) edits.push_back({"parallel.cpu_isa", cpu_isa});
  std::ofstream(path) << EditRecipe(r.text, edits, recipe);
  return path;
}

StepFigures RunArm(const std::string& source_recipe, const std::string& arm, bool probes = false,
                   const std::string& cpu_isa = "") {
  const fs::path dir =
      fs::temp_directory_path() / ("bitparity_bench_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string recipe = WithIterations(source_recipe, 4, dir, cpu_isa);
  LaunchOptions launch;
  launch.executable = BITPARITY_BINARY;
  launch.worker.recipe_path = recipe;
  launch.worker.arm = arm;
  launch.worker.probes = probes;
  launch.trace_path = (dir / (arm + ".h5")).string();
  launch.log_dir = (dir / (arm + ".logs")).string();
  Recipe r = LoadRecipe(recipe);
  launch.world_size = r.world_size();
  launch.timeout_seconds = r.parallel.timeout_seconds;
  LaunchResult result = LaunchArm(launch);
  if (result.exit_code != 0) throw std::runtime_error(result.failure);
  const Trace trace = std::move(result.trace);
  fs::remove_all(dir);
  StepFigures f;
  std::vector<double> steps, record;
  int64_t peak = 0;
  for (const RankTrace& rank : trace.ranks) {
    for (const IterationRecord& it : rank.iterations) {
      peak = std::max(peak, it.peak_bytes);
      if (it.iteration == 1 && rank.iterations.size() > 1) continue;  // warm-up
      if (rank.rank == 0) {
        steps.push_back(it.step_seconds);
        record.push_back(it.record_seconds / it.step_seconds);
      }
    }
  }
  f.step_seconds = Median(steps);
  f.record_fraction = Median(record);
  f.hidden_fraction = AllToAllTimeOf(trace).hidden_fraction();
  f.peak_mib = peak / 1048576.0;
  f.throughput = ThroughputOf(trace);
  SetRates(&f);
  return f;
}

std::string RecipePath(const std::string& name) {
  return std::string(BITPARITY_SOURCE_DIR) + "/recipes/" + name + ".toml";
}

std::string DeviceSuffix() { return BenchDevice() == "cpu" ? "" : "/" + BenchDevice(); }

void SetStepCounters(benchmark::State& state, const StepFigures& f) {
  state.counters["step_ms"] = f.step_seconds * 1e3;
  state.counters["tflops_per_rank"] = f.tflops_per_rank;
  state.counters["hardware_tflops_per_rank"] = f.hardware_tflops_per_rank;
  state.counters["mfu"] = f.mfu;
  state.counters["gemm_ceiling_tflops"] = f.ceiling_tflops;
  state.counters["hidden_a2a_fraction"] = f.hidden_fraction;
  state.counters["harness_overhead"] = f.record_fraction;
  state.counters["peak_MiB"] = f.peak_mib;
}

// BM_Step/<recipe>/<arm> for every arm, and BM_StepRatio/<recipe>/<arm>_vs_<baseline> for every
// overlap-engine arm.
void RegisterRecipe(const std::string& name) {
  const std::string path = RecipePath(name);
  Recipe recipe = LoadRecipe(path);
  const std::string baseline = recipe.compare.baseline;
  for (const std::string& arm : recipe.arm_names()) {
    benchmark::RegisterBenchmark(("BM_Step/" + name + "/" + arm + DeviceSuffix()).c_str(),
                                 [path, arm](benchmark::State& state) {
                                   StepFigures f;
                                   for (auto _ : state) {
                                     try {
                                       f = RunArm(path, arm);
                                     } catch (const std::exception& e) {
                                       state.SkipWithError(e.what());
                                       return;
                                     }
                                     state.SetIterationTime(f.step_seconds);
                                   }
                                   SetStepCounters(state, f);
                                 })
        ->Iterations(1)
        ->UseManualTime()
        ->Unit(benchmark::kMillisecond);
  }
  for (const std::string& arm : recipe.arm_names()) {
    if (arm == baseline || recipe.arm(arm).engine != EngineKind::kOverlap) continue;
    benchmark::RegisterBenchmark(
        ("BM_StepRatio/" + name + "/" + arm + "_vs_" + baseline + DeviceSuffix()).c_str(),
        [path, arm, baseline](benchmark::State& state) {
          StepFigures base, f;
          for (auto _ : state) {
            try {
              base = RunArm(path, baseline);
              f = RunArm(path, arm);
            } catch (const std::exception& e) {
              state.SkipWithError(e.what());
              return;
            }
            state.SetIterationTime(f.step_seconds);
          }
          ShareBestCeiling({&base.throughput, &f.throughput});  // one denominator for both
          SetRates(&base);
          SetRates(&f);
          SetStepCounters(state, f);
          // Above 1: the arm trains faster than its baseline.
          state.counters["throughput_ratio"] =
              f.step_seconds > 0 ? base.step_seconds / f.step_seconds : 0;
          state.counters["baseline_step_ms"] = base.step_seconds * 1e3;
          state.counters["baseline_tflops_per_rank"] = base.tflops_per_rank;
          state.counters["baseline_mfu"] = base.mfu;
        })
        ->Iterations(1)
        ->UseManualTime()
        ->Unit(benchmark::kMillisecond);
  }
}

// One way to run an arm within an alternating benchmark: its counter's suffix and the run's
// settings.
struct RunVariant {
  std::string counter;  // step_ms_<counter>
  bool probes = false;
  std::string cpu_isa;  // "" the recipe's
};

// `benchmark_name`: `arm` of the recipe at `path` run as `first` and as `second`, alternating
// within each repetition so that both see the same machine; their median steps as counters and
// `ratio_name` = second / first + `ratio_offset` (reported, not gated).
void RegisterAlternating(const std::string& benchmark_name, const std::string& path,
                         const std::string& arm, const RunVariant& first, const RunVariant& second,
                         const std::string& ratio_name, double ratio_offset) {
  benchmark::RegisterBenchmark(
      benchmark_name.c_str(),
      [=](benchmark::State& state) {
        StepFigures a, b;
        for (auto _ : state) {
          try {
            a = RunArm(path, arm, first.probes, first.cpu_isa);
            b = RunArm(path, arm, second.probes, second.cpu_isa);
          } catch (const std::exception& e) {
            state.SkipWithError(e.what());
            return;
          }
          state.SetIterationTime(b.step_seconds);
        }
        state.counters["step_ms_" + first.counter] = a.step_seconds * 1e3;
        state.counters["step_ms_" + second.counter] = b.step_seconds * 1e3;
        state.counters[ratio_name] =
            a.step_seconds > 0 ? b.step_seconds / a.step_seconds + ratio_offset : 0;
      })
      ->Iterations(1)
      ->UseManualTime()
      ->Unit(benchmark::kMillisecond);
}

// The cost of node probes (BM_ProbeCost/<recipe>/overlap): the overlap arm with probes off and
// on; probe_overhead = on / off - 1.
void RegisterProbeCost(const std::string& name) {
  RegisterAlternating("BM_ProbeCost/" + name + "/overlap", RecipePath(name), "overlap",
                      {"probes_off", false, ""}, {"probes_on", true, ""}, "probe_overhead", -1.0);
}

// The cost of pinned numerics (BM_PinCost/<recipe>/reference): the reference arm at "native"
// (the host's best kernels) and at the recipe's pinned CPU level (bf16 GEMMs as fp32 GEMMs
// through MKL's COMPATIBLE branch); pinned_over_native.
void RegisterPinCost(const std::string& name) {
  const std::string path = RecipePath(name);
  const std::string pinned = ToString(LoadRecipe(path).parallel.cpu_isa);
  RegisterAlternating("BM_PinCost/" + name + "/reference", path, "reference",
                      {"native", false, "native"}, {"pinned", false, pinned}, "pinned_over_native",
                      0.0);
}

// Cost vs work (BM_Scaling/<axis>/<size>): the reference arm of the default recipe with one
// size changed at a time (iterations, decoder layers, hidden width, which scales the parameters),
// run once through the launcher; the launcher's wall time, the peak tensor memory and the trace's
// bytes, with the parameter count, so that the slope of each against the work shows whether the
// harness adds a superlinear term (the table in docs/performance.md).
void RegisterScaling() {
  struct Axis {
    const char* name;
    std::vector<int64_t> sizes;
    std::vector<RecipeEdit> (*edits)(int64_t size);
  };
  const Axis axes[] = {
      {"iterations",
       {10, 20, 40},
       [](int64_t n) {
         return std::vector<RecipeEdit>{{"train.iterations", n}};
       }},
      {"layers",
       {3, 6, 12},
       [](int64_t n) {
         return std::vector<RecipeEdit>{{"model.layers", n}, {"train.iterations", int64_t{10}}};
       }},
      {"hidden",
       {64, 128, 256},
       [](int64_t n) {
         return std::vector<RecipeEdit>{{"model.hidden", n},
                                        {"model.moe_ffn", n},
                                        {"model.ffn", 2 * n},
                                        {"train.iterations", int64_t{10}}};
       }},
  };
  for (const Axis& axis : axes) {
    for (int64_t size : axis.sizes) {
      const std::vector<RecipeEdit> edits = axis.edits(size);
      benchmark::RegisterBenchmark(
          ("BM_Scaling/" + std::string(axis.name) + "/" + std::to_string(size)).c_str(),
          [edits](benchmark::State& state) {
            const fs::path dir =
                fs::temp_directory_path() / ("bitparity_scaling_" + std::to_string(::getpid()));
            fs::create_directories(dir);
            const Recipe base = LoadRecipe(RecipePath("default"));
            std::vector<RecipeEdit> all = edits;
            all.push_back({"trace.dump_grads_at", std::monostate()});
            all.push_back({"parallel.device", BenchDevice()});
            const std::string recipe_path = (dir / "scaling.toml").string();
            std::ofstream(recipe_path) << EditRecipe(base.text, all, "scaling.toml");
            const Recipe recipe = LoadRecipe(recipe_path);
            LaunchOptions launch;
            launch.executable = BITPARITY_BINARY;
            launch.worker.recipe_path = recipe_path;
            launch.worker.arm = "reference";
            launch.trace_path = (dir / "trace.h5").string();
            launch.log_dir = (dir / "logs").string();
            launch.world_size = recipe.world_size();
            launch.timeout_seconds = recipe.parallel.timeout_seconds;
            LaunchResult result;
            for (auto _ : state) {
              result = LaunchArm(launch);
              if (result.exit_code != 0) {
                state.SkipWithError(result.failure.c_str());
                fs::remove_all(dir);
                return;
              }
              state.SetIterationTime(result.seconds);
            }
            int64_t peak = 0, parameters = 0;
            for (const RankTrace& rank : result.trace.ranks) {
              for (const IterationRecord& it : rank.iterations)
                peak = std::max(peak, it.peak_bytes);
            }
            for (const auto& shape : result.trace.ranks.at(0).param_shapes) {
              int64_t n = 1;
              for (int64_t d : shape) n *= d;
              parameters += n;
            }
            state.counters["wall_s"] = result.seconds;
            state.counters["peak_MiB"] = peak / 1048576.0;
            state.counters["trace_KiB"] = fs::file_size(launch.trace_path) / 1024.0;
            state.counters["rank0_parameters"] = static_cast<double>(parameters);
            state.counters["iterations"] = static_cast<double>(recipe.train.iterations);
            fs::remove_all(dir);
          })
          ->Iterations(1)
          ->UseManualTime()
          ->Unit(benchmark::kMillisecond);
    }
  }
}

}  // namespace

void RegisterGemmBenchmarks();  // bench/gemm_bench.cpp

}  // namespace bitparity

int main(int argc, char** argv) {
  // The level this process pins for its own GEMM benchmarks (ranks pin their recipe's).
  const char* isa = std::getenv("BITPARITY_BENCH_CPU_ISA");
  const std::optional<bitparity::CpuIsa> level =
      bitparity::ValueIn(bitparity::kCpuIsaNames, isa != nullptr && *isa != '\0' ? isa : "avx2");
  if (!level) {
    std::fprintf(stderr,
                 "BITPARITY_BENCH_CPU_ISA=%s: not a CPU level (sse4_2, avx2, avx512, "
                 "native)\n",
                 isa);
    return 2;
  }
  bitparity::PinEnvironment("cpu", *level);
  bitparity::ConfigureDeterminism(1);
  bitparity::RegisterRecipe("default");
  bitparity::RegisterRecipe("memory");
  bitparity::RegisterRecipe("perf");
  bitparity::RegisterGemmBenchmarks();
  bitparity::RegisterScaling();
  bitparity::RegisterProbeCost("default");
  bitparity::RegisterPinCost("default");
  bitparity::RegisterPinCost("perf");
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}

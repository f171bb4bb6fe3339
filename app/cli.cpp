#include "app/cli.h"

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <optional>
#include <set>
#include <sstream>

#include "core/cpu_isa.h"
#include "core/cuda_support.h"
#include "core/determinism.h"
#include "core/errors.h"
#include "core/pipeline_schedule.h"
#include "core/provenance.h"
#include "core/rank_protocol.h"
#include "core/recipe.h"
#include "core/recipe_schema.h"
#include "core/recompute_plan.h"
#include "core/trace.h"
#include "core/trace_keys.h"
#include "harness/launcher.h"
#include "harness/matrix_command.h"
#include "harness/resources.h"
#include "harness/run_command.h"
#include "harness/trace_compare.h"
#include "harness/trace_explain.h"
#include "runtime/plan_command.h"
#include "runtime/worker.h"

namespace bitparity {
namespace {

namespace fs = std::filesystem;

constexpr char kExitCodesHelp[] =
    "Exit codes: 0 pass, 1 a check failed (traces differ), 2 bad input (recipe, command line,\n"
    "trace or golden; nothing is written), 3 infrastructure fault (a rank crashed or timed out),\n"
    "130 / 143 interrupted by SIGINT / SIGTERM (ranks ended, temporaries removed, report written).";

std::string RecomputeText(const RecomputeConfig& r) {
  if (!r.full()) return "none";
  if (r.unit == RecomputeUnit::kChunk) return "full, the whole chunk at once";
  return std::string("full, ") + ToString(r.method) + ", num_layers " +
         std::to_string(r.num_layers);
}

// One line per CPU level: what it pins, how bf16 GEMMs run, and whether this host runs it.
void PrintCpuLevels(const std::set<std::string>& flags) {
  std::cout << "CPU levels:  [parallel] cpu_isa (default " << ToString(ParallelConfig().cpu_isa)
            << ") pins, in every rank:\n";
  for (const EnumName<CpuIsa>& level : kCpuIsaNames) {
    const CpuIsaPin& pin = PinOf(level.value);
    const std::vector<std::string> missing = MissingCpuFlags(level.value, flags);
    std::string lacks;
    for (const std::string& f : missing) lacks += (lacks.empty() ? "" : " ") + f;
    std::cout << "  " << std::left << std::setw(8) << level.name << std::right
              << " ATEN_CPU_CAPABILITY="
              << (pin.aten_cpu_capability ? pin.aten_cpu_capability : "(host's best)")
              << " ONEDNN_MAX_CPU_ISA="
              << (pin.onednn_max_cpu_isa ? pin.onednn_max_cpu_isa : "(host's best)")
              << " MKL_CBWR=" << pin.mkl_cbwr << "; bf16 GEMMs "
              << (pin.bf16_gemm == GemmPath::kNative ? "oneDNN's own"
                                                     : "as fp32 GEMMs (fp32 accumulation)")
              << (missing.empty() ? "" : "; not on this host (lacks " + lacks + ")") << "\n";
  }
}

// What this build is and what this machine gives it: the facts that decide a run's bits and
// whether the GPU path can run here. Reads the process as it is: pins nothing.
int Info() {
  const std::map<std::string, std::string> p = CollectProvenance();
  const std::set<std::string> flags = HostCpuFlags();
  std::cout << "bitparity " << p.at("git_revision") << " (" << p.at("compiler") << ")\n"
            << "LibTorch:    " << p.at("libtorch_version") << " (" << p.at("libtorch_library")
            << ")\n"
            << "BLAS:        " << p.at("blas") << "; oneDNN " << p.at("onednn_version") << "\n"
            << "CPU:         " << p.at("cpu_model") << " (" << p.at("cpu_vendor") << ") ["
            << RelevantCpuFlags(flags)
            << "]; ATen's kernels unpinned: " << p.at("aten_cpu_capability") << "\n";
  PrintCpuLevels(flags);
  if (!cuda::Compiled()) {
    std::cout << "GPU path:    not built (LibTorch without CUDA, or -DBITPARITY_CUDA=OFF)\n";
    return kExitPass;
  }
  const int gpus = cuda::DeviceCount();
  std::cout << "GPU path:    built; " << gpus << " GPU(s) visible\n";
  for (int g = 0; g < gpus; ++g) {
    const std::map<std::string, std::string> gp = cuda::Provenance(g);
    std::cout << "  cuda:" << g << "      " << gp.at("gpu_name") << " (sm_" << gp.at("gpu_sm")
              << ", " << std::stoll(gp.at("gpu_memory_bytes")) / (1 << 20) << " MiB), driver "
              << gp.at("cuda_driver") << ", CUDA runtime " << gp.at("cuda_runtime") << ", cuBLAS "
              << gp.at("cublas") << ", cuDNN " << gp.at("cudnn") << ", NCCL " << gp.at("nccl")
              << "\n";
  }
  return kExitPass;
}

int Validate(const std::string& path) {
  Recipe recipe = LoadRecipe(path);
  for (const std::string& warning : CheckResources(recipe, LocalMachine())) {
    std::cerr << "warning: " << warning << "\n";
  }
  const ModelConfig& m = recipe.model;
  std::cout << recipe.path << ": ok (recipe '" << recipe.name << "')\n"
            << "  model: hidden " << m.hidden << ", heads " << m.heads << ", layers " << m.layers
            << " (" << m.first_k_dense << " dense), experts " << m.experts << " top-" << m.topk
            << ", vocab " << m.vocab << ", seq " << m.seq_len << ", mtp " << m.mtp_layers
            << (m.mhc() ? ", mHC " + std::to_string(m.mhc_streams) + " streams" : std::string())
            << ", " << ParameterCount(m) << " parameters\n"
            << "  parallel: pp " << recipe.parallel.pp << " x ep " << recipe.parallel.ep
            << " (world " << recipe.world_size() << ", rank = pp_rank x ep + ep_rank), vpp "
            << recipe.parallel.vpp << ", threads/rank " << recipe.parallel.threads << ", timeout "
            << recipe.parallel.timeout_seconds << " s\n"
            << "  train: " << recipe.train.iterations << " iterations, global batch "
            << recipe.train.global_batch << ", micro batch " << recipe.train.micro_batch << ", "
            << recipe.microbatches_per_rank() << " microbatches/rank\n";
  if (recipe.parallel.pp > 1) {
    const PipelineLayout pipeline = recipe.pipeline();
    std::cout << "  pipeline: \"" << pipeline.Text() << "\", stages per pipeline rank:\n";
    for (const std::string& line : pipeline.Describe()) std::cout << "    " << line << "\n";
    PipelineScheduleConfig schedule =
        PipelineScheduleConfig::Of(pipeline, recipe.microbatches_per_rank());
    for (const bool overlap : {false, true}) {
      const bool used = std::any_of(
          recipe.arms.begin(), recipe.arms.end(),
          [&](const ArmConfig& a) { return (a.engine == EngineKind::kOverlap) == overlap; });
      if (!used) continue;
      schedule.ep_overlap = overlap;
      std::cout << (overlap ? "  combined 1F1B order of the overlap arms (one more warm-up "
                              "forward; [F+B] merged into one step):\n"
                            : "  1F1B order (F/B chunk.microbatch):\n");
      for (int64_t r = 0; r < schedule.pp; ++r) {
        std::cout << "    rank " << r << ": "
                  << FormatPipelineSchedule(PipelineSchedule(schedule, r)) << "\n";
      }
    }
  }
  for (const ArmConfig& arm : recipe.arms) {
    std::string segments;
    std::vector<std::string> warnings;
    if (recipe.parallel.pp > 1) {
      // Counted within each chunk; the stages in virtual order, separated by '|'.
      for (const PipelineStage& stage : recipe.pipeline().stages) {
        const RecomputePlan plan =
            BuildRecomputePlan(arm.recompute, stage.layers, stage.mtp_layers);
        segments +=
            std::string(stage.index ? " | " : "") + FormatChunkSegments(plan, stage, m.layers);
        for (const std::string& w : plan.warnings) {
          if (std::find(warnings.begin(), warnings.end(), w) == warnings.end()) {
            warnings.push_back(w);
          }
        }
      }
    } else {
      const RecomputePlan plan = BuildRecomputePlan(arm.recompute, m.layers, m.mtp_layers);
      segments = FormatSegments(plan, m.layers);
      warnings = plan.warnings;
    }
    std::cout << "  arm " << arm.name << ": engine " << ToString(arm.engine) << ", precision "
              << ToString(arm.precision.recipe) << ", dispatcher " << ToString(arm.dispatcher)
              << ", recompute " << RecomputeText(arm.recompute) << ", segments " << segments
              << "\n";
    for (const std::string& w : warnings) std::cout << "    warning: " << w << "\n";
  }
  return kExitPass;
}

struct ArmOptions {
  std::string recipe;
  std::string arm;
  std::string out;
  std::string log_dir;
  bool quiet = false;
  bool memory_timeline = false;
  bool probes = false;
};

int RunArm(const ArmOptions& o, const std::string& command_line) {
  Recipe recipe = LoadRecipe(o.recipe);
  for (const std::string& warning : CheckResources(recipe, LocalMachine())) {
    std::cerr << "warning: " << warning << "\n";
  }
  std::string arm_name = o.arm;
  if (arm_name.empty()) {
    if (recipe.arms.size() != 1) {
      std::ostringstream names;
      for (const std::string& n : recipe.arm_names()) names << " " << n;
      throw InputError(recipe.path + ": --arm is required (the recipe has arms:" + names.str() +
                       ")");
    }
    arm_name = recipe.arms[0].name;
  }
  recipe.arm(arm_name);  // InputError if unknown
  fs::path out(o.out);
  if (out.has_parent_path() && !fs::is_directory(out.parent_path())) {
    std::error_code ec;
    fs::create_directories(out.parent_path(), ec);
    if (ec) throw InputError(o.out + ": cannot create directory " + out.parent_path().string());
  }
  if (fs::is_directory(out)) throw InputError(o.out + ": is a directory, expected a .h5 path");
  // The trace replaces --out atomically: never a file that is an input, nor one that is not a
  // trace (a recipe, a report, anything else a typo could name).
  std::error_code ec;
  if (fs::exists(out, ec)) {
    if (fs::equivalent(out, recipe.path, ec)) {
      throw InputError("--out " + o.out + " is the recipe " + recipe.path +
                       "; refusing to replace an input with a trace");
    }
    try {
      ReadTraceIsolated(o.out, /*require_complete=*/false);
    } catch (const std::exception&) {
      throw InputError("--out " + o.out +
                       " exists and is not a bitparity trace; refusing to overwrite it (remove it "
                       "or name another file)");
    }
  }

  LaunchOptions launch;
  launch.executable = SelfExecutable();
  launch.worker.recipe_path = recipe.path;
  launch.recipe_text = recipe.text;
  launch.worker.arm = arm_name;
  launch.trace_path = o.out;
  launch.log_dir = o.log_dir.empty() ? o.out + ".logs" : o.log_dir;
  launch.world_size = recipe.world_size();
  launch.timeout_seconds = recipe.parallel.timeout_seconds;
  launch.trace_attributes[trace_keys::kCommandLine] = command_line;
  launch.worker.memory_timeline = o.memory_timeline;
  launch.worker.probes = o.probes;
  if (!o.quiet) {
    launch.on_progress = [](const ProgressEvent& e) {
      std::printf("  iteration %lld/%lld  loss %.6f  %.3f s\n", static_cast<long long>(e.iteration),
                  static_cast<long long>(e.iterations), e.loss, e.step_seconds);
      std::fflush(stdout);
    };
    std::printf("arm %s of %s: %lld rank(s), logs in %s\n", arm_name.c_str(), recipe.path.c_str(),
                static_cast<long long>(recipe.world_size()), launch.log_dir.c_str());
  }
  LaunchResult result = LaunchArm(launch);
  if (result.exit_code != kExitPass) {
    std::cerr << "error: " << result.failure;
    return result.exit_code;
  }
  const auto& its = result.trace.ranks[0].iterations;
  std::printf("wrote %s: %zu iterations, loss %.6f -> %.6f, %.1f s\n", o.out.c_str(), its.size(),
              its.front().loss, its.back().loss, result.seconds);
  return kExitPass;
}

int Diff(const std::string& path_a, const std::string& path_b, int64_t show, bool explain) {
  Trace a = ReadTraceIsolated(path_a);
  Trace b = ReadTraceIsolated(path_b);
  if (explain) {
    const TraceExplanation e = ExplainTraces(a, b);
    std::printf("%s%s", e.records.identical ? "identical\n" : "DIFFERENT\n",
                e.Describe("A", "B").c_str());
    return e.records.identical ? kExitPass : kExitCheckFailed;
  }
  CompareScope scope;
  scope.keep = std::max<int64_t>(1, show);
  TraceComparison c = CompareTraces(a, b, scope);
  if (c.identical) {
    std::printf("identical: %zu rank(s), %zu iterations, %lld records compared bit for bit\n",
                a.ranks.size(), a.ranks[0].iterations.size(),
                static_cast<long long>(c.compared_records));
    return kExitPass;
  }
  if (c.first->record == "structure") {
    std::printf("DIFFERENT: %s\n", c.first->Describe().c_str());
    return kExitCheckFailed;
  }
  std::printf("DIFFERENT: first difference at %s\n", c.first->Describe().c_str());
  std::printf("%lld of %lld records differ\n", static_cast<long long>(c.differing_records),
              static_cast<long long>(c.compared_records));
  for (size_t i = 1; i < c.kept.size(); ++i) std::printf("  %s\n", c.kept[i].Describe().c_str());
  return kExitCheckFailed;
}

int Timeline(const std::string& path, int64_t rank, int64_t iteration, bool csv) {
  Trace trace = ReadTraceIsolated(path);
  if (rank < 0 || rank >= static_cast<int64_t>(trace.ranks.size())) {
    throw InputError(path + ": has no rank " + std::to_string(rank));
  }
  const std::vector<MemorySample>& samples = trace.ranks[rank].memory_timeline;
  if (samples.empty()) {
    throw InputError(path + ": has no memory timeline (record one with --memory-timeline)");
  }
  if (csv) std::printf("iteration,time_ms,current_bytes,peak_bytes,phase\n");
  int64_t start = 0, shown = 0;
  for (const MemorySample& s : samples) {
    if (iteration > 0 && s.iteration != iteration) continue;
    if (s.label == "iteration start") start = s.time_ns;
    const double ms = (s.time_ns - start) / 1e6;
    if (csv) {
      std::printf("%lld,%.3f,%lld,%lld,\"%s\"\n", static_cast<long long>(s.iteration), ms,
                  static_cast<long long>(s.current_bytes), static_cast<long long>(s.peak_bytes),
                  s.label.c_str());
    } else {
      std::printf("%4lld %9.2f ms  live %9.3f MiB  peak %9.3f MiB  %s\n",
                  static_cast<long long>(s.iteration), ms, s.current_bytes / 1048576.0,
                  s.peak_bytes / 1048576.0, s.label.c_str());
    }
    ++shown;
  }
  if (shown == 0)
    throw InputError(path + ": no samples for iteration " + std::to_string(iteration));
  return kExitPass;
}

int Merge(const std::string& parts_dir, const std::string& out) {
  Trace merged = MergeTraceParts(parts_dir);
  WriteTrace(out, merged);
  std::printf("wrote %s: %zu rank(s), %zu iterations\n", out.c_str(), merged.ranks.size(),
              merged.ranks[0].iterations.size());
  return kExitPass;
}

std::string JoinArgs(int argc, char** argv) {
  std::string out;
  for (int i = 0; i < argc; ++i) out += (i ? " " : "") + std::string(argv[i]);
  return out;
}

// Parses argv into `app`; the exit code when parsing ended the command (help printed: 0, a bad
// command line: 2), nullopt when the chosen command should run.
std::optional<int> Parse(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return kExitBadInput;
  }
  return std::nullopt;
}

// `bitparity worker ...`: one rank process (core/rank_protocol.h spells its flags).
int RunWorkerCommand(int argc, char** argv) {
  CLI::App app{"bitparity rank process: trains one arm on this rank and writes its trace part"};
  WorkerRequest request;
  app.add_option(kWorkerFlagRecipe, request.recipe_path, "Recipe file")->required();
  app.add_option(kWorkerFlagArm, request.arm, "Arm of the recipe to train")->required();
  app.add_option(kWorkerFlagOutDir, request.out_dir, "Directory for rank_<r>.h5")->required();
  app.add_option(kWorkerFlagDumpAt, request.dump_at,
                 "Also store full main grads at these iterations")
      ->delimiter(',');
  app.add_option(kWorkerFlagStopAfter, request.stop_after,
                 "Stop after this iteration (0: run them all)");
  app.add_flag(kWorkerFlagMemoryTimeline, request.memory_timeline,
               "Record live bytes at every phase mark");
  app.add_flag(kWorkerFlagProbes, request.probes,
               "Record node probes whatever the recipe's [trace] probes says");
  app.add_option(kWorkerFlagThreads, request.threads,
                 "Intra-op threads instead of the recipe's [parallel] threads (0: the recipe's)")
      ->check(CLI::NonNegativeNumber);
  app.add_flag(kWorkerFlagDeterministicAlgorithms, request.deterministic_algorithms,
               "Force deterministic algorithms whatever else turns them off");
  app.add_option(kWorkerFlagRecipeDigest, request.recipe_digest,
                 "Digest of the recipe text the launcher read (the rank refuses another)");
  if (std::optional<int> exit_code = Parse(app, argc, argv)) return *exit_code;
  return RunMappingErrors([&] { return RunWorker(request); }, std::cerr, kRankExitFailed);
}

}  // namespace

int RunCli(int argc, char** argv) {
  // Rank processes are started as `bitparity worker ...` by the launcher (or by srun/torchrun).
  if (argc > 1 && std::string(argv[1]) == kWorkerCommand) {
    return RunWorkerCommand(argc - 1, argv + 1);
  }
  CLI::App app{
      "bitparity: a deterministic test-and-benchmark harness for MoE training optimizations.\n"
      "It trains arms (engines) of a recipe on real rank processes, requires them to agree bit\n"
      "for bit, and reports what differs."};
  app.footer(kExitCodesHelp);
  app.require_subcommand(1);

  RunOptions run_options;
  std::string run_arms;
  CLI::App* run = app.add_subcommand(
      "run",
      "The main job: run every arm of a recipe twice, require each to reproduce itself bit for "
      "bit, compare the arms under the recipe's [compare] policy, check the baseline against its "
      "golden, and write junit.xml and report.json");
  run->add_option("RECIPE", run_options.recipe_path, "Recipe file (.toml)")->required();
  run->add_option("--out", run_options.out_dir,
                  "Output directory: DIR/<arm>/run<k>/trace.h5, junit.xml, report.json "
                  "(default: out/<recipe name>)");
  run->add_option("--arms", run_arms, "Comma-separated arms to run (default: all)");
  run->add_option("--repeats", run_options.repeats, "Runs per arm (default 2)")
      ->check(CLI::Range(1, 100));
  run->add_option("--golden-dir", run_options.golden_dir,
                  "Golden store: DIR/<recipe>/<fingerprint>.h5 (default: golden/ next to the "
                  "recipes folder)");
  run->add_flag("--update-golden", run_options.update_golden,
                "Write the baseline's trace as the golden for this machine's fingerprint, only "
                "if every other check passes");
  run->add_flag("--no-golden", run_options.no_golden, "Skip the golden check");
  run->add_flag("--require-golden", run_options.require_golden,
                "Fail the golden check when the store holds goldens of this recipe but none for "
                "this machine's fingerprint (CI: ci/gate passes it); without it that is a skip, "
                "with what differs from the nearest golden explained");
  run->add_option("--localize-runs", run_options.localize_runs,
                  "Most reruns spent on naming the first differing element (default 4)")
      ->check(CLI::Range(0, 100));
  bool no_attribution = false;
  run->add_flag("--no-attribution", no_attribution,
                "When an arm does not reproduce itself, do not rerun its failing window with one "
                "factor changed at a time (intra-op threads 1, deterministic algorithms forced) "
                "to say which restores reproducibility");
  run->add_option("--perturb", run_options.perturb,
                  "Developer switch: ARM:RUN:rank=R,iteration=I,param=NAME,element=K[,ulps=N] "
                  "adds N ulp to one main-grad element in run RUN (or 'all') of ARM");
  run->add_flag("--quiet", run_options.quiet, "Only print the summary");
  run->add_flag("--memory-timeline", run_options.memory_timeline,
                "Record a memory timeline in every trace (see `bitparity timeline`)");
  run->add_flag("--probes", run_options.probes,
                "Record node probes in every trace ([trace] probes = \"nodes\"): a digest of "
                "every schedule operation's outputs and input gradients, so that a difference "
                "is named at the operation that made it, and replays are checked against their "
                "first pass");
  run->footer(kExitCodesHelp);

  MatrixOptions matrix_options;
  CLI::App* matrix = app.add_subcommand(
      "matrix",
      "Expand a matrix file's base recipe over its axes (precision, recompute, mtp_layers, "
      "dispatcher, pipeline) and run every cell like `run`; one junit.xml and report.json for all "
      "cells");
  matrix->add_option("FILE", matrix_options.matrix_path, "Matrix file (.toml)")->required();
  matrix->add_option("--filter", matrix_options.filter,
                     "A filter named in the file's [matrix.filters], or axis=value[|value],...");
  matrix->add_option("--jobs", matrix_options.jobs, "Cells run at a time (default 1)")
      ->check(CLI::Range(1, 64));
  matrix->add_option("--out", matrix_options.out_dir, "Output directory (default: out/<name>)");
  matrix->add_option("--repeats", matrix_options.repeats, "Runs per arm and cell (default 2)")
      ->check(CLI::Range(1, 100));
  matrix->add_flag("--quiet", matrix_options.quiet, "Do not print the details of failed cells");
  matrix->add_flag("--probes", matrix_options.probes,
                   "Record node probes in every cell's traces (see `run --probes`)");
  matrix->add_flag("--require-golden", matrix_options.require_golden,
                   "Every cell fails its golden check when only goldens of other fingerprints "
                   "exist (see `run --require-golden`)");
  matrix->footer(kExitCodesHelp);

  std::string validate_recipe;
  bool validate_keys = false, validate_keys_summary = false;
  CLI::App* validate = app.add_subcommand(
      "validate", "Check a recipe and print its arms and recompute segments (no training)");
  validate->add_option("RECIPE", validate_recipe, "Recipe file (.toml)");
  validate->add_flag("--keys", validate_keys,
                     "Print every recipe key with its type, default and meaning (Markdown; "
                     "docs/recipe-keys.md is this output) instead of checking a recipe");
  validate->add_flag("--keys-summary", validate_keys_summary,
                     "Print one row per recipe table with its keys (the README's table)");

  ArmOptions arm_options;
  CLI::App* arm = app.add_subcommand(
      "arm", "Train one arm of a recipe once on its world of rank processes and write a trace");
  arm->add_option("RECIPE", arm_options.recipe, "Recipe file (.toml)")->required();
  arm->add_option("--arm", arm_options.arm,
                  "Name of the arm ([arms.NAME] in the recipe); optional if it has one arm");
  arm->add_option("--out", arm_options.out, "Trace file to write (HDF5, written atomically)")
      ->required();
  arm->add_option("--log-dir", arm_options.log_dir,
                  "Directory for the rank logs (default: TRACE.logs next to the trace)");
  arm->add_flag("--quiet", arm_options.quiet, "Do not print per-iteration progress");
  arm->add_flag("--memory-timeline", arm_options.memory_timeline,
                "Record live and peak CPU tensor bytes at every phase of every iteration (see "
                "`bitparity timeline`)");
  arm->add_flag("--probes", arm_options.probes,
                "Record node probes ([trace] probes = \"nodes\"): a digest of every schedule "
                "operation's outputs and input gradients");
  arm->footer(kExitCodesHelp);

  std::string diff_a, diff_b;
  int64_t diff_show = 1;
  CLI::App* diff = app.add_subcommand(
      "diff", "Compare two traces record by record and name the first difference");
  diff->add_option("A", diff_a, "First trace (.h5)")->required();
  diff->add_option("B", diff_b, "Second trace (.h5)")->required();
  bool diff_explain = false;
  diff->add_flag("--explain", diff_explain,
                 "Explain the difference of traces from different machines or CPU levels: the "
                 "fingerprint fields that differ, the first divergent iteration and record with "
                 "its ULP distance, and with node probes in both the first divergent operation");
  diff->add_option("--show", diff_show, "How many differences to list (default 1: the first)")
      ->check(CLI::Range(1, 1000000));
  diff->footer("Exit codes: 0 bit-identical, 1 different, 2 unreadable or invalid trace.");

  std::string plan_recipe, plan_arm;
  bool plan_json = false;
  CLI::App* plan = app.add_subcommand(
      "plan",
      "Print an arm's schedule for one iteration without training: recompute segments "
      "and every node operation in order");
  plan->add_option("RECIPE", plan_recipe, "Recipe file (.toml)")->required();
  plan->add_option("--arm", plan_arm, "Name of the arm")->required();
  plan->add_flag("--json", plan_json, "Print JSON instead of a table");

  std::string timeline_trace;
  int64_t timeline_rank = 0, timeline_iteration = 0;
  bool timeline_csv = false;
  CLI::App* timeline = app.add_subcommand(
      "timeline", "Print a trace's memory timeline: live and peak CPU tensor bytes at every phase");
  timeline->add_option("TRACE", timeline_trace, "Trace recorded with --memory-timeline")
      ->required();
  timeline->add_option("--rank", timeline_rank, "Rank (default 0)");
  timeline->add_option("--iteration", timeline_iteration, "Only this iteration (default: all)");
  timeline->add_flag("--csv", timeline_csv, "Print CSV");

  CLI::App* info = app.add_subcommand(
      "info",
      "Print this build's LibTorch, BLAS and reproducibility settings, and the GPUs it sees");

  std::string merge_dir, merge_out;
  CLI::App* merge = app.add_subcommand(
      "merge", "Merge the rank parts written by `bitparity worker` ranks into one trace");
  merge->add_option("PARTS_DIR", merge_dir, "Directory holding rank_<r>.h5 parts")->required();
  merge->add_option("--out", merge_out, "Trace file to write")->required();

  // A first word that is no subcommand and no option: name it (CLI11 would only say that a
  // subcommand is required).
  if (argc > 1 && argv[1][0] != '-') {
    std::string known;
    bool found = false;
    for (const CLI::App* sub : app.get_subcommands({})) {
      found |= sub->get_name() == argv[1];
      known += (known.empty() ? "" : ", ") + sub->get_name();
    }
    if (!found) {
      std::cerr << "error: unknown command '" << argv[1] << "' (commands: " << known
                << "; see bitparity --help)" << std::endl;
      return kExitBadInput;
    }
  }
  if (std::optional<int> exit_code = Parse(app, argc, argv)) return *exit_code;

  return RunMappingErrors(
      [&] {
        if (*info) return Info();
        if (*validate) {
          if (validate_keys || validate_keys_summary) {
            std::cout << (validate_keys ? RecipeKeysMarkdown() : RecipeKeysSummaryMarkdown());
            return static_cast<int>(kExitPass);
          }
          if (validate_recipe.empty()) {
            throw InputError("validate: RECIPE is required (or --keys for the key reference)");
          }
          return Validate(validate_recipe);
        }
        if (*matrix) {
          matrix_options.command_line = JoinArgs(argc, argv);
          const InterruptScope interrupts;
          return RunMatrix(matrix_options, std::cout);
        }
        if (*run) {
          std::stringstream arms(run_arms);
          std::string arm;
          while (std::getline(arms, arm, ',')) {
            if (!arm.empty()) run_options.arms.push_back(arm);
          }
          run_options.command_line = JoinArgs(argc, argv);
          run_options.attribution = !no_attribution;
          const InterruptScope interrupts;
          run_options.terminal = ::isatty(STDOUT_FILENO) == 1;
          return RunRecipe(run_options, std::cout).exit_code;
        }
        if (*arm) {
          const InterruptScope interrupts;
          return RunArm(arm_options, JoinArgs(argc, argv));
        }
        if (*diff) return Diff(diff_a, diff_b, diff_show, diff_explain);
        if (*merge) return Merge(merge_dir, merge_out);
        if (*timeline) {
          return Timeline(timeline_trace, timeline_rank, timeline_iteration, timeline_csv);
        }
        if (*plan) return PrintPlan(plan_recipe, plan_arm, plan_json);
        return static_cast<int>(kExitBadInput);
      },
      std::cerr);
}

}  // namespace bitparity

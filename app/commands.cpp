#include "app/commands.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <optional>
#include <set>
#include <sstream>

#include "comm/developer_switches.h"
#include "comm/rank_protocol.h"
#include "config/recipe.h"
#include "config/recipe_schema.h"
#include "config/recompute_plan.h"
#include "core/cuda_support.h"
#include "core/display_text.h"
#include "core/errors.h"
#include "harness/isolated_trace_read.h"
#include "harness/launcher.h"
#include "harness/matrix_command.h"
#include "harness/resources.h"
#include "harness/run_command.h"
#include "harness/trace_compare.h"
#include "harness/trace_explain.h"
#include "harness/trace_merge.h"
#include "numerics/cpu_isa.h"
#include "numerics/determinism.h"
#include "numerics/provenance.h"
#include "runtime/plan_command.h"
#include "runtime/worker.h"
#include "schedule/pipeline_schedule.h"
#include "trace/checkpoint_file.h"
#include "trace/trace.h"
#include "trace/trace_keys.h"

namespace bitparity {
namespace {

namespace fs = std::filesystem;

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

// The address space this process maps now (/proc/self/status VmSize), in bytes; -1 unknown.
int64_t MappedAddressSpaceBytes() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmSize:", 0) == 0) return std::stoll(line.substr(7)) * 1024;  // "N kB"
  }
  return -1;
}

// What `ulimit -v` must allow: the libraries (LibTorch with its CUDA libraries on a GPU-enabled
// build) map most of it before main, in bitparity and in every rank process alike.
void PrintAddressSpace() {
  const int64_t mapped = MappedAddressSpaceBytes();
  if (mapped < 0) return;
  char line[160];
  std::snprintf(line, sizeof(line),
                "Address:     %.2f GiB mapped after loading the libraries (each rank maps as "
                "much): `ulimit -v` must allow it and the training's memory\n",
                static_cast<double>(mapped) / (1 << 30));
  std::cout << line;
}

}  // namespace

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
  PrintAddressSpace();  // before any CUDA call maps more
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
            << recipe.parallel.vpp << ", threads/rank " << recipe.parallel.threads << ", CPU level "
            << ToString(recipe.parallel.cpu_isa) << ", timeout " << recipe.parallel.timeout_seconds
            << " s\n"
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
      const bool used =
          std::any_of(recipe.arms.begin(), recipe.arms.end(), [&](const ArmConfig& a) {
            return a.engine != EngineKind::kExternal &&
                   (a.engine == EngineKind::kOverlap) == overlap;
          });
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
    if (arm.engine == EngineKind::kExternal) {
      std::cout << "  arm " << arm.name << ": external, command";
      for (const std::string& argument : arm.command) std::cout << " " << argument;
      std::cout << "\n";
      continue;
    }
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

namespace {

// InputError naming `what` unless `folder` (or, when it does not exist yet, the nearest folder
// above it, where it would be made) can be written.
void RequireWritableFolder(const fs::path& folder, const std::string& what) {
  std::error_code ec;
  fs::path existing = fs::absolute(folder, ec);
  while (!fs::exists(existing, ec) && existing.has_parent_path() &&
         existing.parent_path() != existing) {
    existing = existing.parent_path();
  }
  if (::access(existing.c_str(), W_OK) != 0) {
    throw InputError(what + ": cannot write in " + existing.string() + ": " + std::strerror(errno));
  }
}

// --out of `bitparity arm`: its folder made; never a folder, an input, or a file that is not a
// trace (a recipe, a report, anything else a typo could name), which the trace would replace;
// and its folder and `log_dir` writable, before any rank starts.
void CheckArmOutput(const std::string& path, const std::string& log_dir, const Recipe& recipe) {
  fs::path out(path);
  if (out.has_parent_path() && !fs::is_directory(out.parent_path())) {
    std::error_code ec;
    fs::create_directories(out.parent_path(), ec);
    if (ec) throw InputError(path + ": cannot create directory " + out.parent_path().string());
  }
  if (fs::is_directory(out)) throw InputError(path + ": is a directory, expected a .h5 path");
  // The trace replaces --out atomically: never a file that is an input, nor one that is not a
  // trace (a recipe, a report, anything else a typo could name).
  std::error_code ec;
  if (fs::exists(out, ec)) {
    if (fs::equivalent(out, recipe.path, ec)) {
      throw InputError("--out " + path + " is the recipe " + recipe.path +
                       "; refusing to replace an input with a trace");
    }
    try {
      ReadTraceIsolated(path, /*require_complete=*/false);
    } catch (const std::exception&) {
      throw InputError("--out " + path +
                       " exists and is not a bitparity trace; refusing to overwrite it (remove it "
                       "or name another file)");
    }
  }
  // A folder the user named that cannot take the trace or the logs is bad input, as `run --out`
  // treats it, found before any rank starts.
  RequireWritableFolder(out.has_parent_path() ? out.parent_path() : fs::path("."), "--out " + path);
  RequireWritableFolder(log_dir, "the log directory " + log_dir);
}

// The checkpoint options of `bitparity arm` into the ranks' request, as absolute paths (the
// ranks may start in another folder). Every rank's checkpoint file is read in a child process
// first: a damaged one is bad input naming it, not a rank that HDF5 crashed.
void RequestCheckpoints(const ArmOptions& o, const Recipe& recipe, WorkerRequest* request) {
  if (!o.checkpoint_at.empty() && o.checkpoint_dir.empty()) {
    throw InputError("--checkpoint-at needs --checkpoint-dir");
  }
  for (int64_t it : o.checkpoint_at) {  // a resume needs an iteration left to train
    if (it < 1 || it >= recipe.train.iterations) {
      throw InputError("--checkpoint-at " + std::to_string(it) + " is outside [1, " +
                       std::to_string(recipe.train.iterations - 1) + "] (" + recipe.path +
                       " trains " + std::to_string(recipe.train.iterations) + " iterations)");
    }
  }
  request->checkpoint_at = o.checkpoint_at;
  if (!o.checkpoint_dir.empty()) {
    request->checkpoint_dir = fs::absolute(o.checkpoint_dir).string();
  }
  if (!o.resume_from.empty()) {
    std::error_code ec;
    if (!fs::is_directory(o.resume_from, ec)) {
      throw InputError("--resume-from " + o.resume_from +
                       ": not a checkpoint folder (iteration_<K>/ holding rank_<r>.h5)");
    }
    request->resume_from = fs::absolute(o.resume_from).string();
    for (int64_t rank = 0; rank < recipe.world_size(); ++rank) {
      CheckCheckpointIsolated((fs::path(o.resume_from) / CheckpointFileName(rank)).string());
    }
  }
}

}  // namespace

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
  const ArmConfig& arm = recipe.arm(arm_name);  // InputError if unknown
  CheckEnvironmentSwitchesApply({&recipe, {arm.engine}, !o.checkpoint_at.empty()});
  const std::string log_dir = o.log_dir.empty() ? o.out + ".logs" : o.log_dir;
  CheckArmOutput(o.out, log_dir, recipe);
  LaunchOptions launch;
  launch.executable = SelfExecutable();
  launch.worker.recipe_path = recipe.path;
  launch.recipe_text = recipe.text;
  launch.worker.arm = arm_name;
  launch.trace_path = o.out;
  launch.log_dir = log_dir;
  launch.world_size = recipe.world_size();
  launch.timeout_seconds = recipe.parallel.timeout_seconds;
  launch.trace_attributes[trace_keys::kCommandLine] = command_line;
  launch.worker.memory_timeline = o.memory_timeline;
  launch.worker.probes = o.probes;
  RequestCheckpoints(o, recipe, &launch.worker);
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
    std::cerr << "error: " << EscapedText(result.failure, /*keep_whitespace=*/true);
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
  RequireWritableFolder(fs::path(out).has_parent_path() ? fs::path(out).parent_path() : ".",
                        "--out " + out);
  // Parts come from outside: each is read in a child process, so that a crafted one is bad input.
  Trace merged = MergeTraceParts(
      parts_dir, [](const std::string& path) { return ReadTraceIsolated(path, false); });
  std::error_code ec;
  for (const std::string& part :
       TracePartPaths(parts_dir, static_cast<int64_t>(merged.ranks.size()))) {
    if (fs::equivalent(out, part, ec)) {
      throw InputError("--out " + out + ": is the input part " + part +
                       "; refusing to replace a part with the merged trace");
    }
  }
  const fs::path folder = fs::path(out).has_parent_path() ? fs::path(out).parent_path() : ".";
  if (fs::equivalent(folder, parts_dir, ec)) {
    throw InputError("--out " + out + ": lies in the parts folder " + parts_dir +
                     ", where a later merge would take it for a part; write it elsewhere");
  }
  WriteTrace(out, merged);
  std::printf("wrote %s: %zu rank(s), %zu iterations\n", out.c_str(), merged.ranks.size(),
              merged.ranks[0].iterations.size());
  return kExitPass;
}

}  // namespace bitparity

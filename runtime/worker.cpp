#include "runtime/worker.h"

#include <torch/torch.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <iostream>

#include "core/cuda_support.h"
#include "core/determinism.h"
#include "core/errors.h"
#include "core/memory.h"
#include "core/provenance.h"
#include "core/rank_context.h"
#include "core/recipe.h"
#include "core/trace.h"
#include "runtime/debug_switches.h"
#include "runtime/memory_model.h"
#include "runtime/trainer.h"

namespace bitparity {
namespace {

std::string EnvOrEmpty(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

std::string RecomputeSummary(const RecomputeConfig& r) {
  if (!r.full()) return "none";
  if (r.unit == RecomputeUnit::kChunk) return "full/chunk";
  return std::string("full/") + ToString(r.method) + "/" + std::to_string(r.num_layers);
}

std::string UtcNow() {
  std::time_t now = std::time(nullptr);
  char buffer[32];
  std::strftime(buffer, sizeof(buffer), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  return buffer;
}

int Run(const std::string& recipe_path, const std::string& arm_name, const std::string& out_dir,
        const std::vector<int64_t>& extra_dumps, int64_t stop_after, bool memory_timeline) {
  Recipe recipe = LoadRecipe(recipe_path);
  for (int64_t it : extra_dumps) {
    if (it < 1 || it > recipe.train.iterations) {
      throw InputError("--dump-at " + std::to_string(it) + " is outside [1, " +
                       std::to_string(recipe.train.iterations) + "]");
    }
    recipe.trace.dump_grads_at.push_back(it);
  }
  const ArmConfig& arm = recipe.arm(arm_name);
  RankContext context = RankContextFromEnvironment();
  ParallelLayout layout = ParallelLayout::Make(context.rank, context.world_size, recipe.parallel.ep,
                                               recipe.model.experts);
  FaultPlan fault = ParseFaultPlan(EnvOrEmpty("BITPARITY_FAULT"));
  GradPerturbation perturbation = ParseGradPerturbation(EnvOrEmpty("BITPARITY_PERTURB"));
  if (!std::filesystem::is_directory(out_dir)) {
    throw InputError(out_dir + ": output directory does not exist");
  }
  // The first line of every rank's log: which process and process group it is, so that a
  // launcher's tests can check that no member of the group outlives a failed run.
  std::printf("@rank rank=%lld pid=%d pgid=%d\n", static_cast<long long>(context.rank),
              static_cast<int>(::getpid()), static_cast<int>(::getpgrp()));
  std::fflush(stdout);
  MaybeInjectFault(fault, context.rank, 0);

  // The environment MKL, cuBLAS and NCCL read at their first use, before anything computes.
  const DeviceKind device = recipe.parallel.device;
  PinEnvironment(ToString(device));
  MemoryTracker::Install();
  MemoryTimeline::Enable(memory_timeline);
  ConfigureDeterminism(recipe.parallel.threads);
  if (device == DeviceKind::kCuda && cuda::Compiled()) cuda::ConfigureDeterminism();
  // Collectives give up a little before the launcher's deadline, so that a rank stuck waiting for
  // a hung peer exits on its own and the launcher can tell the hung rank from its victims.
  const auto timeout = std::chrono::milliseconds(
      std::max<int64_t>(1000, static_cast<int64_t>(recipe.parallel.timeout_seconds * 600.0)));
  std::shared_ptr<Communicator> comm = Communicator::Connect(context, device, timeout);
  const int gpu = comm->device().is_cuda() ? comm->device().index() : -1;
  if (gpu >= 0) MemoryTracker::TrackCudaDevice(gpu);

  InjectedBugs bugs = InjectedBugs::Parse(EnvOrEmpty("BITPARITY_INJECT_BUG"));
  Trainer trainer(recipe, arm, layout, comm, bugs);
  std::map<std::string, std::string> model_attributes;
  trainer.set_perturbation(perturbation);
  for (const std::string& w : trainer.warnings()) std::cerr << "warning: " << w << "\n";

  // The memory model's prediction for this arm, from probes of this rank's model (collective).
  {
    MemoryProbe probe = ProbeMemory(trainer.model(), trainer.MakeMicrobatches(1).front());
    ModelConfig model = recipe.model;
    model.dispatcher = arm.dispatcher;
    MemoryPrediction prediction = PredictPeak(probe, arm, model, recipe.microbatches_per_rank(),
                                              MemoryTracker::current_bytes());
    model_attributes["memory_model.predicted_peak_bytes"] = std::to_string(prediction.peak_bytes);
    model_attributes["memory_model.static_bytes"] = std::to_string(prediction.static_bytes);
    model_attributes["memory_model.peak_phase"] = prediction.peak_phase;
    model_attributes["memory_model.input_bytes"] = std::to_string(probe.input_bytes);
    int64_t largest = 0;
    for (const LayerMemory& layer : probe.layers) largest = std::max(largest, layer.retained);
    model_attributes["memory_model.layer_bytes"] = std::to_string(largest);
  }
  RankTrace rank = trainer.DescribeRank();
  rank.attributes.insert(model_attributes.begin(), model_attributes.end());
  rank.attributes["pid"] = std::to_string(::getpid());
  rank.attributes["rank_source"] = context.source;
  for (const auto& [key, value] : CollectProvenance(gpu)) {
    rank.attributes["provenance." + key] = value;
  }

  const int64_t iterations =
      stop_after > 0 ? std::min(stop_after, recipe.train.iterations) : recipe.train.iterations;
  const auto& dump_at = recipe.trace.dump_grads_at;
  for (int64_t it = 1; it <= iterations; ++it) {
    MaybeInjectFault(fault, context.rank, it);
    std::vector<TensorDump> dumps;
    const bool dump = std::find(dump_at.begin(), dump_at.end(), it) != dump_at.end();
    IterationRecord record = trainer.RunIteration(it, dump ? &dumps : nullptr);
    if (dump) rank.grad_dumps[it] = std::move(dumps);
    if (context.rank == 0) {
      std::printf(
          "@progress iteration=%lld iterations=%lld loss=%.6f grad_norm=%.6g lr=%.6g "
          "step_seconds=%.4f peak_bytes=%lld\n",
          static_cast<long long>(it), static_cast<long long>(iterations), record.loss,
          record.grad_norm, record.learning_rate, record.step_seconds,
          static_cast<long long>(record.peak_bytes));
      std::fflush(stdout);
    }
    rank.iterations.push_back(std::move(record));
  }

  rank.memory_timeline = MemoryTimeline::Take();
  Trace trace;
  trace.attributes["recipe"] = recipe.text;
  trace.attributes["recipe_path"] = recipe.path;
  trace.attributes["recipe_name"] = recipe.name;
  trace.attributes["arm"] = arm.name;
  trace.attributes["engine"] = ToString(arm.engine);
  trace.attributes["precision"] = ToString(arm.precision.recipe);
  trace.attributes["dispatcher"] = ToString(arm.dispatcher);
  trace.attributes["recompute"] = RecomputeSummary(arm.recompute);
  trace.attributes["world_size"] = std::to_string(layout.world_size);
  trace.attributes["threads_per_rank"] = std::to_string(recipe.parallel.threads);
  trace.attributes["device"] = ToString(device);
  trace.attributes["comm_transport"] = comm->transport_description();
  trace.attributes["created_utc"] = UtcNow();
  std::string warnings;
  for (const std::string& w : trainer.warnings()) warnings += (warnings.empty() ? "" : "\n") + w;
  trace.attributes["warnings"] = warnings;
  trace.ranks.push_back(std::move(rank));
  char name[32];
  std::snprintf(name, sizeof(name), "rank_%05lld.h5", static_cast<long long>(context.rank));
  WriteTrace((std::filesystem::path(out_dir) / name).string(), trace);
  return kExitPass;
}

}  // namespace

int WorkerMain(int argc, char** argv) {
  CLI::App app{"bitparity rank process: trains one arm on this rank and writes its trace part"};
  std::string recipe_path, arm_name, out_dir;
  std::vector<int64_t> extra_dumps;
  int64_t stop_after = 0;
  app.add_option("--recipe", recipe_path, "Recipe file")->required();
  app.add_option("--arm", arm_name, "Arm of the recipe to train")->required();
  app.add_option("--out-dir", out_dir, "Directory for rank_<r>.h5")->required();
  app.add_option("--dump-at", extra_dumps, "Also store full main grads at these iterations")
      ->delimiter(',');
  app.add_option("--stop-after", stop_after, "Stop after this iteration (0: run them all)");
  bool memory_timeline = false;
  app.add_flag("--memory-timeline", memory_timeline, "Record live bytes at every phase mark");
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return kExitBadInput;
  }
  try {
    return Run(recipe_path, arm_name, out_dir, extra_dumps, stop_after, memory_timeline);
  } catch (const InputError& e) {
    std::cerr << "error: " << e.what() << std::endl;
    return kExitBadInput;
  } catch (const InfrastructureError& e) {
    std::cerr << "infrastructure error: " << e.what() << std::endl;
    return kExitInfrastructure;
  } catch (const c10::Error& e) {
    std::cerr << "error: " << e.what_without_backtrace() << std::endl;
    return kExitInfrastructure;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << std::endl;
    return kExitCheckFailed;
  }
}

}  // namespace bitparity

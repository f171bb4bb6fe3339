#include "runtime/worker.h"

#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <iostream>

#include "core/clock.h"
#include "core/cuda_support.h"
#include "core/determinism.h"
#include "core/errors.h"
#include "core/gemm_throughput.h"
#include "core/memory.h"
#include "core/node_probes.h"
#include "core/provenance.h"
#include "core/rank_context.h"
#include "core/rank_protocol.h"
#include "core/recipe.h"
#include "core/trace.h"
#include "core/trace_keys.h"
#include "model/gemm.h"
#include "runtime/debug_switches.h"
#include "runtime/memory_model.h"
#include "runtime/trainer.h"

namespace bitparity {
namespace {

std::string RecomputeSummary(const RecomputeConfig& r) {
  if (!r.full()) return "none";
  if (r.unit == RecomputeUnit::kChunk) return "full/chunk";
  return std::string("full/") + ToString(r.method) + "/" + std::to_string(r.num_layers);
}

int Run(const WorkerRequest& request) {
  Recipe recipe = LoadRecipe(request.recipe_path);
  const std::string digest = RecipeDigest(recipe.text);
  if (!request.recipe_digest.empty() && digest != request.recipe_digest) {
    throw InputError(request.recipe_path + ": the recipe's digest is " + digest +
                     ", the launcher read " + request.recipe_digest +
                     "; the recipe changed after the run started");
  }
  for (int64_t it : request.dump_at) {
    if (it < 1 || it > recipe.train.iterations) {
      throw InputError(std::string(kWorkerFlagDumpAt) + " " + std::to_string(it) +
                       " is outside [1, " + std::to_string(recipe.train.iterations) + "]");
    }
    recipe.trace.dump_grads_at.push_back(it);
  }
  const ArmConfig& arm = recipe.arm(request.arm);
  const std::string& out_dir = request.out_dir;
  const int64_t stop_after = request.stop_after;
  RankContext context = RankContextFromEnvironment();
  ParallelLayout layout = ParallelLayout::Make(context.rank, context.world_size, recipe.parallel.ep,
                                               recipe.model.experts, recipe.parallel.pp);
  const DebugSwitches switches = ReadDebugSwitches();
  const FaultPlan& fault = switches.fault;
  if (!std::filesystem::is_directory(out_dir)) {
    throw InputError(out_dir + ": output directory does not exist");
  }
  // The first line of every rank's log: which process and process group it is, so that a
  // launcher's tests can check that no member of the group outlives a failed run.
  std::printf("%s\n", FormatRankIdentityLine({context.rank, ::getpid(), ::getpgrp()}).c_str());
  std::fflush(stdout);
  MaybeInjectFault(fault, context.rank, 0);

  // The environment ATen, oneDNN, MKL, cuBLAS and NCCL read at their first use, before anything
  // computes: among it the recipe's CPU instruction-set level.
  const DeviceKind device = recipe.parallel.device;
  RequireHostRuns(recipe.parallel.cpu_isa, request.recipe_path + ": ");
  PinEnvironment(ToString(device), recipe.parallel.cpu_isa);
  MemoryTracker::Install();
  MemoryTimeline::Enable(request.memory_timeline);
  ConfigureDeterminism(request.threads > 0 ? request.threads : recipe.parallel.threads);
  // An injected kernel fault runs as a rank that does not force deterministic algorithms would,
  // unless the request forces them (an attribution rerun).
  if (switches.bugs.runtime.nondeterministic_kernel && !request.deterministic_algorithms) {
    AllowNondeterministicAlgorithms();
  }
  if (device == DeviceKind::kCuda && cuda::Compiled()) cuda::ConfigureDeterminism();
  // Collectives give up a little before the launcher's deadline, so that a rank stuck waiting for
  // a hung peer exits on its own and the launcher can tell the hung rank from its victims.
  const auto timeout = std::chrono::milliseconds(
      std::max<int64_t>(1000, static_cast<int64_t>(recipe.parallel.timeout_seconds * 600.0)));
  std::shared_ptr<Communicator> comm = Communicator::Connect(context, device, timeout);
  const int gpu = comm->device().is_cuda() ? comm->device().index() : -1;
  if (gpu >= 0) MemoryTracker::TrackCudaDevice(gpu);

  Trainer trainer(recipe, arm, layout, comm, switches.bugs);
  std::map<std::string, std::string> model_attributes;
  trainer.set_perturbation(switches.perturbation);
  for (const std::string& w : trainer.warnings()) std::cerr << "warning: " << w << "\n";

  // The memory model's prediction for this arm, from probes of this rank's model (collective
  // over the EP group; the pipeline stages probe their own layers).
  {
    MemoryProbe probe = ProbeMemory(trainer.model(), trainer.MakeMicrobatches(1).front());
    const ModelConfig& model = trainer.model().config();  // the arm's, resolved once
    MemoryPrediction prediction =
        PredictPeak(probe, arm, model, recipe.pipeline(), layout.pp_rank,
                    recipe.microbatches_per_rank(), MemoryTracker::current_bytes());
    model_attributes[trace_keys::kMemoryModelPredictedPeakBytes] =
        std::to_string(prediction.peak_bytes);
    model_attributes[trace_keys::kMemoryModelStaticBytes] = std::to_string(prediction.static_bytes);
    model_attributes[trace_keys::kMemoryModelPeakPhase] = prediction.peak_phase;
    model_attributes[trace_keys::kMemoryModelInputBytes] = std::to_string(probe.input_bytes);
    int64_t largest = 0;
    for (const LayerMemory& layer : probe.layers) largest = std::max(largest, layer.retained);
    model_attributes[trace_keys::kMemoryModelLayerBytes] = std::to_string(largest);
    trainer.set_replay_levels(std::move(prediction.replay_levels));
  }
  // The ceiling MFU is against, in the dtype this arm's GEMMs run in (emulated FP8 runs bf16
  // GEMMs), on the process's GEMM path, with this rank's threads, on its device, as loaded as it
  // is now.
  {
    const GemmThroughput ceiling = MeasureGemmCeiling(
        arm.precision.recipe == PrecisionRecipe::kFp32 ? at::kFloat : at::kBFloat16, comm->device(),
        gemm::Multiply, ToString(gemm::ActivePath()));
    char rate[32];
    std::snprintf(rate, sizeof(rate), "%.6g", ceiling.best_flops_per_second());
    model_attributes[trace_keys::kGemmCeilingFlopsPerSecond] = rate;
    model_attributes[trace_keys::kGemmCeilingGemm] = ceiling.Describe();
  }
  RankTrace rank = trainer.DescribeRank();
  rank.attributes.insert(model_attributes.begin(), model_attributes.end());
  rank.attributes[trace_keys::kPid] = std::to_string(::getpid());
  rank.attributes[trace_keys::kRankSource] = context.source;
  for (const auto& [key, value] : CollectProvenance(gpu)) {
    rank.attributes[trace_keys::kProvenancePrefix + key] = value;
  }

  const int64_t iterations =
      stop_after > 0 ? std::min(stop_after, recipe.train.iterations) : recipe.train.iterations;
  const auto& dump_at = recipe.trace.dump_grads_at;
  // After the memory probe, whose passes are not the training's.
  NodeProbes::Enable(request.probes || recipe.trace.node_probes);
  for (int64_t it = 1; it <= iterations; ++it) {
    MaybeInjectFault(fault, context.rank, it);
    std::vector<TensorDump> dumps;
    const bool dump = std::find(dump_at.begin(), dump_at.end(), it) != dump_at.end();
    trainer.engine().RecordScheduleTimeline(it == iterations);  // the report's overlap timeline
    IterationRecord record = trainer.RunIteration(it, dump ? &dumps : nullptr);
    if (dump) rank.grad_dumps[it] = std::move(dumps);
    if (context.rank == 0) {
      const ProgressEvent progress{it,
                                   iterations,
                                   record.loss,
                                   record.grad_norm,
                                   record.learning_rate,
                                   record.step_seconds,
                                   record.peak_bytes};
      std::printf("%s\n", FormatProgressLine(progress).c_str());
      std::fflush(stdout);
    }
    rank.iterations.push_back(std::move(record));
  }

  rank.memory_timeline = MemoryTimeline::Take();
  rank.probes = NodeProbes::Take();
  rank.replay_census = trainer.TakeReplayCensus();
  rank.schedule_timeline = trainer.engine().ScheduleTimeline();
  if (!rank.schedule_timeline.empty()) {
    int64_t first = rank.schedule_timeline.front().begin_ns;
    for (const ScheduleInterval& e : rank.schedule_timeline) first = std::min(first, e.begin_ns);
    for (ScheduleInterval& e : rank.schedule_timeline) {
      e.begin_ns -= first;
      e.end_ns -= first;
    }
  }
  Trace trace;
  trace.attributes[trace_keys::kRecipe] = recipe.text;
  trace.attributes[trace_keys::kRecipeDigest] = digest;
  std::string switches_seen;
  for (const std::string& s : ActiveDeveloperSwitches()) {
    switches_seen += (switches_seen.empty() ? "" : "; ") + s;
  }
  if (!switches_seen.empty()) trace.attributes[trace_keys::kDeveloperSwitches] = switches_seen;
  trace.attributes[trace_keys::kRecipePath] = recipe.path;
  trace.attributes[trace_keys::kRecipeName] = recipe.name;
  trace.attributes[trace_keys::kArm] = arm.name;
  trace.attributes[trace_keys::kEngine] = ToString(arm.engine);
  trace.attributes[trace_keys::kPrecision] = ToString(arm.precision.recipe);
  trace.attributes[trace_keys::kDispatcher] = ToString(arm.dispatcher);
  trace.attributes[trace_keys::kRecompute] = RecomputeSummary(arm.recompute);
  trace.attributes[trace_keys::kWorldSize] = std::to_string(layout.world_size);
  trace.attributes[trace_keys::kThreadsPerRank] = std::to_string(recipe.parallel.threads);
  trace.attributes[trace_keys::kDevice] = ToString(device);
  trace.attributes[trace_keys::kCommTransport] = comm->transport_description();
  trace.attributes[trace_keys::kCreatedUtc] = UtcTimestamp();
  std::string warnings;
  for (const std::string& w : trainer.warnings()) warnings += (warnings.empty() ? "" : "\n") + w;
  trace.attributes[trace_keys::kWarnings] = warnings;
  trace.ranks.push_back(std::move(rank));
  WriteTrace((std::filesystem::path(out_dir) / RankPartFileName(context.rank)).string(), trace);
  return kExitPass;
}

}  // namespace

int RunWorker(const WorkerRequest& request) {
  try {
    return Run(request);
  } catch (const c10::Error& e) {
    // A LibTorch error is a fault of the run; its message without the C++ backtrace.
    throw InfrastructureError(e.what_without_backtrace());
  }
}

}  // namespace bitparity

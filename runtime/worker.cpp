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

#include "comm/rank_context.h"
#include "comm/rank_protocol.h"
#include "config/recipe.h"
#include "core/clock.h"
#include "core/cuda_support.h"
#include "core/errors.h"
#include "core/memory.h"
#include "model/gemm.h"
#include "numerics/determinism.h"
#include "numerics/gemm_throughput.h"
#include "numerics/provenance.h"
#include "runtime/checkpoint.h"
#include "runtime/debug_switches.h"
#include "runtime/memory_model.h"
#include "runtime/trainer.h"
#include "trace/digest.h"
#include "trace/node_probes.h"
#include "trace/trace.h"
#include "trace/trace_keys.h"

namespace bitparity {
namespace {

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

std::string RecomputeSummary(const RecomputeConfig& r) {
  if (!r.full()) return "none";
  if (r.unit == RecomputeUnit::kChunk) return "full/chunk";
  return std::string("full/") + ToString(r.method) + "/" + std::to_string(r.num_layers);
}

// The recipe text the launcher handed over (its digest checked), with the request's extra dump
// iterations.
Recipe LoadRequestedRecipe(const WorkerRequest& request) {
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
  for (int64_t it : request.checkpoint_at) {  // a resume needs an iteration left to train
    if (it < 1 || it >= recipe.train.iterations) {
      throw InputError(std::string(kWorkerFlagCheckpointAt) + " " + std::to_string(it) +
                       " is outside [1, " + std::to_string(recipe.train.iterations - 1) + "]");
    }
  }
  if (!request.checkpoint_at.empty() && request.checkpoint_dir.empty()) {
    throw InputError(std::string(kWorkerFlagCheckpointAt) + " needs " + kWorkerFlagCheckpointDir);
  }
  return recipe;
}

// The environment ATen, oneDNN, MKL, cuBLAS and NCCL read at their first use, before anything
// computes: among it the recipe's CPU instruction-set level; then memory accounting, threads and
// deterministic algorithms.
void PrepareProcess(const Recipe& recipe, const WorkerRequest& request,
                    const DebugSwitches& switches) {
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
}

// What the rank knows of its model before training: the memory model's prediction (from probes of
// this rank's model, collective over the EP group; the pipeline stages probe their own layers),
// handed to the trainer for the recompute census too, and the GEMM ceiling MFU is against.
std::map<std::string, std::string> ModelAttributes(Trainer& trainer, const Recipe& recipe,
                                                   const ArmConfig& arm,
                                                   const ParallelLayout& layout,
                                                   const at::Device& device) {
  std::map<std::string, std::string> attributes;
  MemoryProbe probe = ProbeMemory(trainer.model(), trainer.MakeMicrobatches(1).front());
  const ModelConfig& model = trainer.model().config();  // the arm's, resolved once
  MemoryPrediction prediction =
      PredictPeak(probe, arm, model, recipe.pipeline(), layout.pp_rank,
                  recipe.microbatches_per_rank(), MemoryTracker::current_bytes());
  attributes[trace_keys::kMemoryModelPredictedPeakBytes] = std::to_string(prediction.peak_bytes);
  attributes[trace_keys::kMemoryModelStaticBytes] = std::to_string(prediction.static_bytes);
  attributes[trace_keys::kMemoryModelPeakPhase] = prediction.peak_phase;
  attributes[trace_keys::kMemoryModelInputBytes] = std::to_string(probe.input_bytes);
  int64_t largest = 0;
  for (const LayerMemory& layer : probe.layers) largest = std::max(largest, layer.retained);
  attributes[trace_keys::kMemoryModelLayerBytes] = std::to_string(largest);
  trainer.set_replay_levels(std::move(prediction.replay_levels));
  // The ceiling in the dtype this arm's GEMMs run in (emulated FP8 runs bf16 GEMMs), on the
  // process's GEMM path, with this rank's threads, on its device, as loaded as it is now.
  const GemmThroughput ceiling = MeasureGemmCeiling(
      arm.precision.recipe == PrecisionRecipe::kFp32 ? at::kFloat : at::kBFloat16, device,
      gemm::Multiply, ToString(gemm::ActivePath()));
  char rate[32];
  std::snprintf(rate, sizeof(rate), "%.6g", ceiling.best_flops_per_second());
  attributes[trace_keys::kGemmCeilingFlopsPerSecond] = rate;
  attributes[trace_keys::kGemmCeilingGemm] = ceiling.Describe();
  return attributes;
}

// Trains from the trainer's position through iteration `iterations` into `rank`'s records (rank 0
// prints a progress line each), saving the checkpoints the request asks for, then takes the
// memory timeline, node probes, census and schedule timeline they recorded.
void Train(Trainer& trainer, const Recipe& recipe, int64_t iterations, const WorkerRequest& request,
           const RankContext& context, const DebugSwitches& switches, RankTrace* rank) {
  const auto& dump_at = recipe.trace.dump_grads_at;
  const auto& checkpoint_at = request.checkpoint_at;
  const FaultPlan& fault = switches.fault;
  for (int64_t it = trainer.position().iteration + 1; it <= iterations; ++it) {
    MaybeInjectFault(fault, context.rank, it);
    std::vector<TensorDump> dumps;
    const bool dump = std::find(dump_at.begin(), dump_at.end(), it) != dump_at.end();
    trainer.engine().RecordScheduleTimeline(it == iterations);  // the report's overlap timeline
    IterationRecord record = trainer.RunIteration(it, dump ? &dumps : nullptr);
    if (dump) rank->grad_dumps[it] = std::move(dumps);
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
    rank->iterations.push_back(std::move(record));
    if (std::find(checkpoint_at.begin(), checkpoint_at.end(), it) != checkpoint_at.end()) {
      const auto start = std::chrono::steady_clock::now();
      const std::string path =
          SaveCheckpoint(trainer, request.checkpoint_dir, switches.bugs.runtime);
      std::printf("checkpoint after iteration %lld: %s, %.2f MiB in %.3f s\n",
                  static_cast<long long>(it), path.c_str(),
                  std::filesystem::file_size(path) / 1048576.0, SecondsSince(start));
      std::fflush(stdout);
    }
  }
  rank->memory_timeline = MemoryTimeline::Take();
  rank->probes = NodeProbes::Take();
  rank->replay_census = trainer.TakeReplayCensus();
  rank->schedule_timeline = trainer.engine().ScheduleTimeline();
  if (!rank->schedule_timeline.empty()) {
    int64_t first = rank->schedule_timeline.front().begin_ns;
    for (const ScheduleInterval& e : rank->schedule_timeline) first = std::min(first, e.begin_ns);
    for (ScheduleInterval& e : rank->schedule_timeline) {
      e.begin_ns -= first;
      e.end_ns -= first;
    }
  }
}

// Restores the trainer from the checkpoint folder `folder` and records where it resumed (the
// restored masters' digests too, for the restart-replay check), printing how long it took.
void Resume(const std::string& folder, Trainer* trainer, RankTrace* rank) {
  const auto start = std::chrono::steady_clock::now();
  ResumeFromCheckpoint(folder, trainer);
  const int64_t after = trainer->position().iteration;
  rank->attributes[trace_keys::kResumedFrom] = folder;
  rank->attributes[trace_keys::kResumedAfterIteration] = std::to_string(after);
  std::string digests;
  for (uint64_t digest : trainer->MasterDigests()) {
    digests += (digests.empty() ? "" : ",") + HexDigest(digest);
  }
  rank->attributes[trace_keys::kResumedParameterDigests] = digests;
  std::printf("resumed after iteration %lld from %s in %.3f s\n", static_cast<long long>(after),
              folder.c_str(), SecondsSince(start));
  std::fflush(stdout);
}

// The trace-wide attributes of a rank's part: the recipe, the arm, the world and what shaped it.
std::map<std::string, std::string> RunAttributes(const Recipe& recipe, const ArmConfig& arm,
                                                 const ParallelLayout& layout,
                                                 const Communicator& comm,
                                                 const std::vector<std::string>& warnings) {
  std::map<std::string, std::string> a;
  a[trace_keys::kRecipe] = recipe.text;
  a[trace_keys::kRecipeDigest] = RecipeDigest(recipe.text);
  std::string switches_seen;
  for (const std::string& s : ActiveDeveloperSwitches()) {
    switches_seen += (switches_seen.empty() ? "" : "; ") + s;
  }
  if (!switches_seen.empty()) a[trace_keys::kDeveloperSwitches] = switches_seen;
  a[trace_keys::kRecipePath] = recipe.path;
  a[trace_keys::kRecipeName] = recipe.name;
  a[trace_keys::kArm] = arm.name;
  a[trace_keys::kEngine] = ToString(arm.engine);
  a[trace_keys::kPrecision] = ToString(arm.precision.recipe);
  a[trace_keys::kDispatcher] = ToString(arm.dispatcher);
  a[trace_keys::kRecompute] = RecomputeSummary(arm.recompute);
  a[trace_keys::kWorldSize] = std::to_string(layout.world_size);
  a[trace_keys::kThreadsPerRank] = std::to_string(recipe.parallel.threads);
  a[trace_keys::kDevice] = ToString(recipe.parallel.device);
  a[trace_keys::kCommTransport] = comm.transport_description();
  a[trace_keys::kRunIdentity] = comm.run_identity();
  a[trace_keys::kCreatedUtc] = UtcTimestamp();
  std::string joined;
  for (const std::string& w : warnings) joined += (joined.empty() ? "" : "\n") + w;
  a[trace_keys::kWarnings] = joined;
  return a;
}

int Run(const WorkerRequest& request) {
  const Recipe recipe = LoadRequestedRecipe(request);
  const ArmConfig& arm = recipe.arm(request.arm);
  if (arm.engine == EngineKind::kExternal) {
    throw InputError(request.recipe_path + ": arm '" + arm.name +
                     "' is external: its command trains it (bitparity run starts it), not "
                     "bitparity worker");
  }
  RankContext context = RankContextFromEnvironment();
  ParallelLayout layout = ParallelLayout::Make(context.rank, context.world_size, recipe.parallel.ep,
                                               recipe.model.experts, recipe.parallel.pp);
  const DebugSwitches switches = ReadDebugSwitches();
  // What the recipe alone tells (the launcher also checked the arms' engines): a switch that
  // cannot apply is bad input on every rank, before any joins the group.
  CheckEnvironmentSwitchesApply({&recipe,
                                 {},
                                 !recipe.train.checkpoint_at.empty() ||
                                     !request.checkpoint_at.empty() ||
                                     !request.resume_from.empty()});
  // Every rank creates the folder as `run --out` does (the others find it made: no error).
  std::error_code ec;
  std::filesystem::create_directories(request.out_dir, ec);
  if (!std::filesystem::is_directory(request.out_dir)) {
    throw InputError(request.out_dir + ": cannot create the output directory" +
                     (ec ? ": " + ec.message() : std::string(" (a file is in the way)")));
  }
  // The first line of every rank's log: which process and process group it is, so that a
  // launcher's tests can check that no member of the group outlives a failed run.
  std::printf("%s\n", FormatRankIdentityLine({context.rank, ::getpid(), ::getpgrp()}).c_str());
  std::fflush(stdout);
  MaybeInjectFault(switches.fault, context.rank, 0);
  PrepareProcess(recipe, request, switches);
  const auto timeout = std::chrono::milliseconds(
      static_cast<int64_t>(CollectiveTimeoutSeconds(recipe.parallel.timeout_seconds) * 1000.0));
  std::shared_ptr<Communicator> comm =
      Communicator::Connect(context, recipe.parallel.device, timeout);
  const int gpu = comm->device().is_cuda() ? comm->device().index() : -1;
  if (gpu >= 0) MemoryTracker::TrackCudaDevice(gpu);

  Trainer trainer(recipe, arm, layout, comm, switches.bugs);
  trainer.set_perturbation(switches.perturbation);
  if (request.check_switches_only) return kExitPass;  // the model took the switches: no part
  for (const std::string& w : trainer.warnings()) std::cerr << "warning: " << w << "\n";
  const std::map<std::string, std::string> model_attributes =
      ModelAttributes(trainer, recipe, arm, layout, comm->device());
  RankTrace rank = trainer.DescribeRank();
  rank.attributes.insert(model_attributes.begin(), model_attributes.end());
  rank.attributes[trace_keys::kPid] = std::to_string(::getpid());
  rank.attributes[trace_keys::kRankSource] = context.source;
  for (const auto& [key, value] : CollectProvenance(gpu)) {
    rank.attributes[trace_keys::kProvenancePrefix + key] = value;
  }

  const int64_t iterations = request.stop_after > 0
                                 ? std::min(request.stop_after, recipe.train.iterations)
                                 : recipe.train.iterations;
  // After the memory probe, whose passes are not the training's, as in the run it resumes.
  if (!request.resume_from.empty()) Resume(request.resume_from, &trainer, &rank);
  NodeProbes::Enable(request.probes || recipe.trace.node_probes);
  Train(trainer, recipe, iterations, request, context, switches, &rank);
  Trace trace;
  trace.attributes = RunAttributes(recipe, arm, layout, *comm, trainer.warnings());
  trace.ranks.push_back(std::move(rank));
  WriteTrace((std::filesystem::path(request.out_dir) / RankPartFileName(context.rank)).string(),
             trace);
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

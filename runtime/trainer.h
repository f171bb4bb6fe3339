#ifndef BITPARITY_RUNTIME_TRAINER_H_
#define BITPARITY_RUNTIME_TRAINER_H_

// The training loop of one rank, shared by every arm: build this rank's microbatches, run the
// arm's engine, reduce the non-expert main grads over the data-parallel group in rank order,
// clip by the global norm, step Adam, and record what the trace keeps.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/developer_switches.h"
#include "comm/rank_context.h"
#include "config/recipe.h"
#include "model/engine.h"
#include "model/gpt.h"
#include "numerics/flop_count.h"
#include "numerics/synthetic_data.h"
#include "runtime/injected_bugs.h"
#include "runtime/memory_model.h"
#include "runtime/optimizer.h"
#include "trace/checkpoint_file.h"
#include "trace/trace.h"

namespace bitparity {

class Trainer {
 public:
  // `bugs` re-creates known overlap-arm bugs for the tests that prove they are caught.
  Trainer(const Recipe& recipe, const ArmConfig& arm, const ParallelLayout& layout,
          std::shared_ptr<Communicator> comm, const InjectedBugs& bugs = InjectedBugs());
  ~Trainer();

  // Runs 1-based `iteration`, the one after position().iteration, and returns its record (grad
  // dumps go to `dumps` if non-null). Its batch, learning rate and Adam step are the next ones of
  // the position's counters, which it advances.
  IterationRecord RunIteration(int64_t iteration, std::vector<TensorDump>* dumps);

  // Where training stands: iterations, optimizer steps, LR schedule steps and batches done. A
  // resumed trainer is handed its checkpoint's (runtime/checkpoint.h).
  const TrainingPosition& position() const { return position_; }
  void set_position(const TrainingPosition& position) { position_ = position; }

  // InputError when this rank is the one it targets and holds no such parameter or element.
  void set_perturbation(const GradPerturbation& perturbation);

  // The recompute census: from now on, every segment replay of an iteration is recorded with the
  // live bytes above the iteration's start next to the memory model's `levels` (its prediction's
  // replay_levels). TakeReplayCensus returns the samples so far and forgets them.
  void set_replay_levels(std::vector<ReplayLevel> levels) { replay_levels_ = std::move(levels); }
  std::vector<ReplayCensusSample> TakeReplayCensus() { return std::move(replay_census_); }

  // Every fp32 master's digest, in the parameters' order (an iteration's param_digest record).
  std::vector<uint64_t> MasterDigests() const;

  // The static part of this rank's trace: parameter names and shapes.
  RankTrace DescribeRank() const;

  // This rank's microbatches of 1-based `iteration`, drawn from global batch `batch` (1-based;
  // the iteration's own when 0).
  std::vector<ChunkState> MakeMicrobatches(int64_t iteration, int64_t batch = 0) const;

  GptModel& model() { return *model_; }
  AdamOptimizer& optimizer() { return *optimizer_; }
  const Recipe& recipe() const { return recipe_; }
  const ArmConfig& arm() const { return arm_; }
  const ParallelLayout& layout() const { return layout_; }
  Engine& engine() { return *engine_; }
  const std::vector<std::string>& warnings() const { return warnings_; }

 private:
  void ReduceDataParallelGrads();
  // The first stage's and the MTP stage's embedding gradients, summed in that order on both.
  void SumEmbeddingCopies();
  double GlobalGradNorm();
  // `local` per pipeline stage this rank holds, gathered from every rank of its pipeline: the
  // values of every stage, in virtual order.
  std::vector<std::vector<double>> GatherOverStages(const std::vector<std::vector<double>>& local);
  void ApplyPerturbation(int64_t iteration);
  Parameter& PerturbedParameter();  // the parameter the perturbation names (InputError: none)
  void RecordReplayCensus(int64_t iteration, int64_t start_bytes);
  // The pieces of an iteration's record: its counted GEMM FLOPs and communication figures; every
  // main grad's digest (and dump); the norm, clipping and the optimizer step with the parameters'
  // digests after it; the loss terms, gathered over the pipeline and the EP group.
  void RecordFlopsAndComm(const FlopCount& flops, IterationRecord* record);
  void RecordGradients(IterationRecord* record, std::vector<TensorDump>* dumps);
  void ClipAndStep(IterationRecord* record);
  void RecordLosses(const std::vector<MicrobatchLosses>& losses, IterationRecord* record);

  const Recipe& recipe_;
  ArmConfig arm_;
  ParallelLayout layout_;
  std::shared_ptr<Communicator> comm_;     // the world
  std::shared_ptr<Communicator> ep_comm_;  // this rank's stage (the world when pp = 1)
  std::shared_ptr<Communicator> pp_comm_;  // this rank's pipeline (null when pp = 1)
  std::unique_ptr<GptModel> model_;
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<AdamOptimizer> optimizer_;
  MarkovCorpus corpus_;
  TrainingPosition position_;
  GradPerturbation perturbation_;
  std::vector<std::string> warnings_;
  RuntimeBugs runtime_bugs_;
  std::vector<ReplayLevel> replay_levels_;
  std::vector<ReplayCensusSample> replay_census_;
};

}  // namespace bitparity

#endif  // BITPARITY_RUNTIME_TRAINER_H_

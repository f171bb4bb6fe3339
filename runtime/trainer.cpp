#include "runtime/trainer.h"

#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <limits>

#include "core/digest.h"
#include "core/errors.h"
#include "core/memory.h"
#include "model/ops.h"
#include "overlap_impl/overlap_engine.h"
#include "reference/reference_engine.h"

namespace bitparity {
namespace {

uint64_t TensorDigest(const at::Tensor& t) {
  at::Tensor c = t.cpu().contiguous();
  return Digest(c.data_ptr(), static_cast<size_t>(c.numel()) * c.element_size());
}

std::unique_ptr<Engine> MakeEngine(const ArmConfig& arm, GptModel* model, int64_t microbatches,
                                   const InjectedBugs& bugs) {
  switch (arm.engine) {
    case EngineKind::kReference:
      return std::make_unique<ReferenceEngine>(model, arm.recompute);
    case EngineKind::kOverlap:
      return std::make_unique<OverlapEngine>(model, arm.recompute, microbatches, bugs.overlap);
  }
  throw InputError(std::string("arm '") + arm.name + "': engine '" + ToString(arm.engine) +
                   "' is not available in this build");
}

}  // namespace

Trainer::Trainer(const Recipe& recipe, const ArmConfig& arm, const ParallelLayout& layout,
                 std::shared_ptr<Communicator> comm, const InjectedBugs& bugs)
    : recipe_(recipe),
      arm_(arm),
      layout_(layout),
      comm_(std::move(comm)),
      corpus_(recipe.train.seed, recipe.model.vocab, recipe.data.branching) {
  const ModelConfig config = recipe.model_of(arm);
  const double loss_grad_scale =
      1.0 / static_cast<double>(recipe.microbatches_per_rank() * layout.dp_size);
  ops::CheckNativeFp8Support(arm.precision, comm_->device(), arm.precision_table);
  model_ = std::make_unique<GptModel>(config, layout, arm.precision, arm.dispatcher,
                                      recipe.train.seed, loss_grad_scale, comm_, bugs.model);
  engine_ = MakeEngine(arm, model_.get(), recipe.microbatches_per_rank(), bugs);
  optimizer_ = std::make_unique<AdamOptimizer>(recipe.train, &model_->parameters());
  warnings_ = engine_->warnings();
}

Trainer::~Trainer() = default;

RankTrace Trainer::DescribeRank() const {
  RankTrace rank;
  rank.rank = layout_.rank;
  for (const Parameter& p : model_->parameters().all()) {
    rank.param_names.push_back(p.name);
    rank.param_shapes.push_back(p.master.sizes().vec());
  }
  return rank;
}

std::vector<ChunkState> Trainer::MakeMicrobatches(int64_t iteration) const {
  const int64_t b = recipe_.train.micro_batch;
  const int64_t s = recipe_.model.seq_len;
  const int64_t per_rank = recipe_.global_batch_per_rank();
  std::vector<ChunkState> microbatches;
  for (int64_t m = 0; m < recipe_.microbatches_per_rank(); ++m) {
    at::Tensor ids = at::empty({b, s}, at::kLong);
    at::Tensor labels = at::empty({b, s}, at::kLong);
    auto id = ids.accessor<int64_t, 2>();
    auto label = labels.accessor<int64_t, 2>();
    for (int64_t j = 0; j < b; ++j) {
      const int64_t sample = layout_.dp_rank * per_rank + m * b + j;
      std::vector<int64_t> tokens = corpus_.Sample(iteration, sample, s + 1);
      for (int64_t t = 0; t < s; ++t) {
        id[j][t] = tokens[static_cast<size_t>(t)];
        label[j][t] = tokens[static_cast<size_t>(t + 1)];
      }
    }
    ChunkState state;
    state.iteration = iteration;
    state.microbatch = m;
    const at::Device& device = model_->device();
    state.input_ids = ids.to(device);
    state.labels = labels.to(device);
    state.loss_mask = at::ones({b, s}, at::TensorOptions().dtype(at::kFloat).device(device));
    microbatches.push_back(std::move(state));
  }
  return microbatches;
}

void Trainer::ReduceDataParallelGrads() {
  if (layout_.dp_size == 1) return;
  std::vector<at::Tensor> replicated;
  for (Parameter& p : model_->parameters().all()) {
    if (!p.is_expert) replicated.push_back(p.main_grad.reshape({-1}));
  }
  at::Tensor summed = comm_->AllReduceSumOrdered(at::cat(replicated));
  int64_t offset = 0;
  for (Parameter& p : model_->parameters().all()) {
    if (p.is_expert) continue;
    const int64_t n = p.main_grad.numel();
    p.main_grad.view({-1}).copy_(summed.narrow(0, offset, n));
    offset += n;
  }
}

double Trainer::GlobalGradNorm() {
  double replicated = 0, expert = 0;
  for (const Parameter& p : model_->parameters().all()) {
    double sq = p.main_grad.to(at::kDouble).pow(2).sum().item<double>();
    (p.is_expert ? expert : replicated) += sq;
  }
  double total = replicated;
  for (const at::Tensor& part : comm_->AllGather(at::full({1}, expert, at::kDouble))) {
    total += part.item<double>();
  }
  return std::sqrt(total);
}

void Trainer::ApplyPerturbation(int64_t iteration) {
  if (!perturbation_.active() || perturbation_.rank != layout_.rank ||
      perturbation_.iteration != iteration) {
    return;
  }
  for (Parameter& p : model_->parameters().all()) {
    if (p.name != perturbation_.param) continue;
    if (perturbation_.element < 0 || perturbation_.element >= p.main_grad.numel()) {
      throw InputError("perturbation: element " + std::to_string(perturbation_.element) +
                       " is out of range for " + p.name + " (" +
                       std::to_string(p.main_grad.numel()) + " elements)");
    }
    at::Tensor host = p.main_grad.cpu().contiguous();
    float* value = host.data_ptr<float>() + perturbation_.element;
    const float toward = perturbation_.ulps >= 0 ? std::numeric_limits<float>::infinity()
                                                 : -std::numeric_limits<float>::infinity();
    for (int64_t i = 0; i < std::abs(perturbation_.ulps); ++i)
      *value = std::nextafter(*value, toward);
    p.main_grad.copy_(host.view(p.main_grad.sizes()));
    return;
  }
  throw InputError("perturbation: rank " + std::to_string(layout_.rank) +
                   " has no parameter named '" + perturbation_.param + "'");
}

IterationRecord Trainer::RunIteration(int64_t iteration, std::vector<TensorDump>* dumps) {
  const auto start = std::chrono::steady_clock::now();
  ParameterStore& params = model_->parameters();
  MemoryTracker::ResetPeak();
  MemoryTimeline::SetIteration(iteration);
  MemoryTimeline::Mark("iteration start");
  comm_->ResetStats();
  params.ZeroMainGrads();
  std::vector<MicrobatchLosses> losses;
  {
    std::vector<ChunkState> microbatches = MakeMicrobatches(iteration);
    losses = engine_->RunIteration(microbatches);
  }
  ReduceDataParallelGrads();
  ApplyPerturbation(iteration);

  IterationRecord record;
  record.iteration = iteration;
  record.comm_seconds = comm_->stats().in_flight_seconds;
  record.comm_exposed_seconds = comm_->stats().exposed_seconds;
  record.comm_count = comm_->stats().count;
  auto record_start = std::chrono::steady_clock::now();
  for (const Parameter& p : params.all()) {
    at::Tensor grad = p.main_grad.cpu().contiguous();
    record.grad_digests.push_back(TensorDigest(grad));
    if (dumps) {
      TensorDump dump;
      dump.name = p.name;
      dump.shape = grad.sizes().vec();
      const float* data = grad.data_ptr<float>();
      dump.values.assign(data, data + grad.numel());
      dumps->push_back(std::move(dump));
    }
  }
  record.record_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - record_start).count();
  record.grad_norm = GlobalGradNorm();
  const double clip = recipe_.train.clip_grad;
  if (clip > 0) {
    const double coefficient = clip / (record.grad_norm + 1e-6);
    if (coefficient < 1.0) {
      for (Parameter& p : params.all()) p.main_grad.mul_(coefficient);
    }
  }
  record.learning_rate = optimizer_->LearningRate(iteration);
  MemoryTimeline::Mark("gradient reduction and norm");
  optimizer_->Step(iteration, record.learning_rate);
  MemoryTimeline::Mark("optimizer step");
  record_start = std::chrono::steady_clock::now();
  for (const Parameter& p : params.all()) record.param_digests.push_back(TensorDigest(p.master));
  record.record_seconds +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - record_start).count();

  // Loss terms: this rank's means in microbatch order; the global loss summed in rank order.
  const double microbatches = static_cast<double>(losses.size());
  double lm = 0, mtp = 0, aux = 0, objective = 0;
  int64_t mtp_terms = 0;
  for (const MicrobatchLosses& l : losses) {
    lm += l.lm_loss;
    objective += l.objective_value;
    for (float v : l.mtp_losses) {
      mtp += v;
      ++mtp_terms;
    }
    for (const auto& [layer, v] : l.aux_losses) aux += v;
  }
  record.lm_loss = static_cast<float>(lm / microbatches);
  record.mtp_loss = mtp_terms ? static_cast<float>(mtp / mtp_terms) : 0.0f;
  record.aux_loss = static_cast<float>(aux / microbatches);
  double global = 0;
  for (const at::Tensor& part : comm_->AllGather(at::full({1}, objective, at::kDouble))) {
    global += part.item<double>();
  }
  record.loss = static_cast<float>(global / (microbatches * static_cast<double>(layout_.dp_size)));
  record.peak_bytes = MemoryTracker::peak_bytes();
  record.end_bytes = MemoryTracker::current_bytes();
  record.step_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return record;
}

}  // namespace bitparity

#include "runtime/trainer.h"

#include <torch/torch.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <limits>
#include <mutex>
#include <thread>

#include "comm/rank_protocol.h"
#include "core/clock.h"
#include "core/errors.h"
#include "core/memory.h"
#include "model/ops.h"
#include "numerics/determinism.h"
#include "numerics/flop_count.h"
#include "overlap_impl/overlap_engine.h"
#include "reference/reference_engine.h"
#include "trace/digest.h"
#include "trace/node_probes.h"

namespace bitparity {
namespace {

// The P2P tag of the embedding-gradient exchange (apart from the engines' activation tags).
constexpr int64_t kEmbeddingGradTag = int64_t{1} << 30;

std::vector<double> ToDoubles(const at::Tensor& t) {
  at::Tensor host = t.cpu().contiguous();
  return std::vector<double>(host.data_ptr<double>(), host.data_ptr<double>() + host.numel());
}

uint64_t TensorDigest(const at::Tensor& t) {
  at::Tensor c = t.cpu().contiguous();
  return Digest(c.data_ptr(), static_cast<size_t>(c.numel()) * c.element_size());
}

std::unique_ptr<Engine> MakeEngine(const ArmConfig& arm, GptModel* model, int64_t microbatches,
                                   const InjectedBugs& bugs,
                                   std::shared_ptr<Communicator> pipeline) {
  const PipelineLanes lanes =
      bugs.runtime.pipeline_one_lane ? PipelineLanes::kOnePerPeer : PipelineLanes::kPerKind;
  switch (arm.engine) {
    case EngineKind::kReference:
      return std::make_unique<ReferenceEngine>(model, arm.recompute, std::move(pipeline), lanes);
    case EngineKind::kOverlap:
      return std::make_unique<OverlapEngine>(model, arm, microbatches, bugs.overlap,
                                             std::move(pipeline), lanes);
    case EngineKind::kExternal:
      break;  // refused by the worker before a trainer is made
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
  layout_.pipeline = recipe.pipeline();
  runtime_bugs_ = bugs.runtime;
  ep_comm_ = comm_;
  if (layout_.pp_size > 1) {
    // Every rank joins its stage's EP group, then its pipeline.
    ep_comm_ = comm_->Subgroup("ep/" + std::to_string(layout_.pp_rank), layout_.EpGroup());
    pp_comm_ = comm_->Subgroup("pp/" + std::to_string(layout_.ep_rank), layout_.PipelineGroup());
    if (pp_comm_->transport() == Transport::kNccl) {
      // NCCL runs a pair's transfers in issue order on one stream, so a receive posted ahead of
      // a send can wait for a peer whose matching send waits behind its own receive; Megatron
      // batches each step's sends and receives (batch_isend_irecv) for that reason, and the
      // engines here post them one by one.
      throw InputError(
          "[parallel] pp = " + std::to_string(layout_.pp_size) +
          " with device = \"cuda\" needs point-to-point transfers over NCCL, which bitparity "
          "does not batch yet (ranks on separate GPUs could wait for each other forever); run "
          "the pipeline on the CPU, or with its ranks sharing one GPU (host-staged Gloo)");
    }
  }
  const ModelConfig config = recipe.model_of(arm);
  const double loss_grad_scale =
      1.0 / static_cast<double>(recipe.microbatches_per_rank() * layout.dp_size);
  ops::CheckNativeFp8Support(arm.precision, comm_->device(), arm.precision_table);
  model_ = std::make_unique<GptModel>(config, layout_, arm.precision, arm.dispatcher,
                                      recipe.train.seed, loss_grad_scale, ep_comm_, bugs.model);
  engine_ = MakeEngine(arm, model_.get(), recipe.microbatches_per_rank(), bugs, pp_comm_);
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

std::vector<uint64_t> Trainer::MasterDigests() const {
  std::vector<uint64_t> digests;
  for (const Parameter& p : model_->parameters().all()) digests.push_back(TensorDigest(p.master));
  return digests;
}

std::vector<ChunkState> Trainer::MakeMicrobatches(int64_t iteration, int64_t batch) const {
  if (batch == 0) batch = iteration;
  const int64_t b = recipe_.train.micro_batch;
  const int64_t s = recipe_.model.seq_len;
  const int64_t per_rank = recipe_.global_batch_per_rank();
  const bool padded = recipe_.data.padded(s);
  std::vector<ChunkState> microbatches;
  for (int64_t m = 0; m < recipe_.microbatches_per_rank(); ++m) {
    at::Tensor ids = at::zeros({b, s}, at::kLong);
    at::Tensor labels = at::zeros({b, s}, at::kLong);
    at::Tensor positions = at::zeros({b, s}, at::kLong);
    at::Tensor padding = at::ones({b, s}, at::kBool);
    at::Tensor loss_mask = at::zeros({b, s}, at::kFloat);
    auto id = ids.accessor<int64_t, 2>();
    auto label = labels.accessor<int64_t, 2>();
    auto position = positions.accessor<int64_t, 2>();
    auto pad = padding.accessor<bool, 2>();
    auto mask = loss_mask.accessor<float, 2>();
    for (int64_t j = 0; j < b; ++j) {
      const int64_t sample = layout_.dp_rank * per_rank + m * b + j;
      std::vector<int64_t> tokens = corpus_.Sample(batch, sample, s + 1);
      // A padded sample: its tokens, then id, label and position 0, no loss, a padded key.
      const int64_t length =
          padded ? corpus_.SampleLength(batch, sample, recipe_.data.min_length, s) : s;
      for (int64_t t = 0; t < length; ++t) {
        id[j][t] = tokens[static_cast<size_t>(t)];
        label[j][t] = tokens[static_cast<size_t>(t + 1)];
        position[j][t] = t;
        pad[j][t] = false;
        mask[j][t] = 1.0f;
      }
    }
    ChunkState state;
    state.iteration = iteration;
    state.microbatch = m;
    const at::Device& device = model_->device();
    state.input_ids = ids.to(device);
    state.labels = labels.to(device);
    state.loss_mask = loss_mask.to(device);
    if (padded) {
      state.padded_data = true;
      state.position_ids = positions.to(device);
      state.padding_mask = padding.to(device);
    }
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
  at::Tensor summed = ep_comm_->AllReduceSumOrdered(at::cat(replicated));
  int64_t offset = 0;
  for (Parameter& p : model_->parameters().all()) {
    if (p.is_expert) continue;
    const int64_t n = p.main_grad.numel();
    p.main_grad.view({-1}).copy_(summed.narrow(0, offset, n));
    offset += n;
  }
}

void Trainer::SumEmbeddingCopies() {
  if (!pp_comm_ || recipe_.model.mtp_layers == 0) return;
  const PipelineLayout& pipeline = layout_.pipeline;
  int64_t mtp_rank = 0;
  for (const PipelineStage& s : pipeline.stages) {
    if (s.mtp_layers > 0) mtp_rank = s.pp_rank;
  }
  // MTP on rank 0 (in its last chunk) reads the rank's own embedding: there is no copy.
  if (mtp_rank == 0) return;
  if (layout_.pp_rank != 0 && layout_.pp_rank != mtp_rank) return;
  for (Parameter& p : model_->parameters().all()) {
    if (p.name != "embedding") continue;
    // Both ranks add the first stage's gradient and the copy's, in that order.
    const int64_t peer = layout_.pp_rank == 0 ? mtp_rank : 0;
    PendingTransfer send = pp_comm_->StartSend(p.main_grad, peer, kEmbeddingGradTag);
    at::Tensor other = pp_comm_
                           ->StartRecv(p.main_grad.sizes().vec(), p.main_grad.scalar_type(), peer,
                                       kEmbeddingGradTag)
                           .Wait();
    send.Wait();
    at::Tensor sum = layout_.pp_rank == 0 ? p.main_grad + other : other + p.main_grad;
    p.main_grad.copy_(sum);
    return;
  }
}

std::vector<std::vector<double>> Trainer::GatherOverStages(
    const std::vector<std::vector<double>>& local) {
  const size_t stages = layout_.pipeline.stages.size();
  if (!pp_comm_) return local;
  // Flattened as: for each stage of this rank, its index, its count, its values.
  std::vector<double> flat;
  for (size_t s = 0; s < stages; ++s) {
    if (layout_.pipeline.stages[s].pp_rank != layout_.pp_rank) continue;
    flat.push_back(static_cast<double>(s));
    flat.push_back(static_cast<double>(local[s].size()));
    flat.insert(flat.end(), local[s].begin(), local[s].end());
  }
  int64_t longest = 0;
  for (const at::Tensor& n :
       pp_comm_->AllGather(at::full({1}, static_cast<int64_t>(flat.size()), at::kLong))) {
    longest = std::max(longest, n.item<int64_t>());
  }
  // Padded to the longest rank's length (AllGather takes one shape); the first value says how
  // many follow.
  flat.insert(flat.begin(), static_cast<double>(flat.size()));
  flat.resize(static_cast<size_t>(longest) + 1, -1.0);
  std::vector<std::vector<double>> all(stages);
  for (const at::Tensor& part : pp_comm_->AllGather(at::tensor(flat, at::kDouble))) {
    const std::vector<double> values = ToDoubles(part);
    const double* v = values.data();
    const int64_t length = static_cast<int64_t>(v[0]);
    for (int64_t i = 1; i < length + 1;) {
      const size_t stage = static_cast<size_t>(v[i]);
      const int64_t count = static_cast<int64_t>(v[i + 1]);
      all[stage].assign(v + i + 2, v + i + 2 + count);
      i += 2 + count;
    }
  }
  return all;
}

namespace {

// The sum of `terms` added in fp32 (as an atomic add on a device would) in the order the intra-op
// threads take and finish them: one thread adds them in order; several race from a shared cursor
// that starts wherever the clock puts the first claim (as a work-stealing pool's first steal
// would), so the order (so the rounding) changes from run to run even when the operating system
// runs one thread at a time. Only the injected nondeterminism uses it.
double ThreadOrderSum(const std::vector<double>& terms) {
  const int threads = std::max(1, at::get_num_threads());
  const size_t count = terms.size();
  float sum = 0;
  if (threads == 1 || count == 0) {
    for (double term : terms) sum += static_cast<float>(term);
    return sum;
  }
  const size_t first = static_cast<size_t>(SteadyNanoseconds() / 1000) % count;
  std::atomic<size_t> claimed{0};
  std::mutex mutex;
  auto work = [&] {
    for (size_t k = claimed++; k < count; k = claimed++) {
      // Each term costs a few microseconds of varying work, as real work would: the threads'
      // interleaving changes from one call to the next.
      std::this_thread::sleep_for(std::chrono::microseconds(SteadyNanoseconds() / 1000 % 16));
      std::lock_guard<std::mutex> lock(mutex);
      sum += static_cast<float>(terms[(first + k) % count]);
    }
  };
  std::vector<std::thread> workers;
  for (int t = 1; t < threads; ++t) workers.emplace_back(work);
  work();
  for (std::thread& w : workers) w.join();
  return sum;
}

}  // namespace

double Trainer::GlobalGradNorm() {
  // Each parameter's squared sum, by stage in registration order (the whole model's order within
  // a stage), then summed stage by stage in virtual order: the same additions in the same order
  // whatever the pipeline layout. The embedding counts once (the MTP stage's copy is skipped).
  const size_t stages = layout_.pipeline.stages.size();
  std::vector<std::vector<double>> replicated(stages), expert(stages);
  for (const Parameter& p : model_->parameters().all()) {
    if (p.embedding_copy) continue;
    double sq = p.main_grad.to(at::kDouble).pow(2).sum().item<double>();
    (p.is_expert ? expert : replicated)[static_cast<size_t>(p.stage)].push_back(sq);
  }
  replicated = GatherOverStages(replicated);
  expert = GatherOverStages(expert);
  double total = 0, mine = 0;
  for (size_t s = 0; s < stages; ++s) {
    for (double v : replicated[s]) total += v;
    for (double v : expert[s]) mine += v;
  }
  // The injected nondeterminism (runtime/injected_bugs.h): the same sums in the order threads
  // finish their terms.
  const bool racy = runtime_bugs_.thread_order_reduction ||
                    (runtime_bugs_.nondeterministic_kernel && !DeterministicAlgorithmsForced());
  if (racy) {
    std::vector<double> terms;
    for (size_t s = 0; s < stages; ++s) {
      terms.insert(terms.end(), replicated[s].begin(), replicated[s].end());
    }
    total = ThreadOrderSum(terms);
    terms.clear();
    for (size_t s = 0; s < stages; ++s)
      terms.insert(terms.end(), expert[s].begin(), expert[s].end());
    mine = ThreadOrderSum(terms);
  }
  for (const at::Tensor& part : ep_comm_->AllGather(at::full({1}, mine, at::kDouble))) {
    total += part.item<double>();
  }
  return std::sqrt(total);
}

void Trainer::set_perturbation(const GradPerturbation& perturbation) {
  perturbation_ = perturbation;
  // The rank it targets checks, before any training, that it holds the parameter and element.
  if (perturbation_.active() && perturbation_.rank == layout_.rank) PerturbedParameter();
}

Parameter& Trainer::PerturbedParameter() {
  for (Parameter& p : model_->parameters().all()) {
    if (p.name != perturbation_.param) continue;
    if (perturbation_.element < 0 || perturbation_.element >= p.main_grad.numel()) {
      throw InputError(std::string(kPerturbVariable) + ": element " +
                       std::to_string(perturbation_.element) + " is out of range for " + p.name +
                       " (" + std::to_string(p.main_grad.numel()) + " elements on rank " +
                       std::to_string(layout_.rank) + ")");
    }
    return p;
  }
  throw InputError(std::string(kPerturbVariable) + ": rank " + std::to_string(layout_.rank) +
                   " has no parameter named '" + perturbation_.param + "'");
}

void Trainer::ApplyPerturbation(int64_t iteration) {
  if (!perturbation_.active() || perturbation_.rank != layout_.rank ||
      perturbation_.iteration != iteration) {
    return;
  }
  Parameter& p = PerturbedParameter();
  at::Tensor host = p.main_grad.cpu().contiguous();
  float* value = host.data_ptr<float>() + perturbation_.element;
  const float toward = perturbation_.ulps >= 0 ? std::numeric_limits<float>::infinity()
                                               : -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < std::abs(perturbation_.ulps); ++i) {
    *value = std::nextafter(*value, toward);
  }
  p.main_grad.copy_(host.view(p.main_grad.sizes()));
}

void Trainer::RecordReplayCensus(int64_t iteration, int64_t start_bytes) {
  if (replay_levels_.empty()) return;
  for (const SegmentReplayMark& mark : engine_->segment_replays()) {
    auto level = std::find_if(replay_levels_.begin(), replay_levels_.end(),
                              [&](const ReplayLevel& l) { return l.point == mark.point; });
    if (level == replay_levels_.end()) continue;  // a faulty plan's replay the model lacks
    const SegmentReplayPoint& at = mark.point;
    replay_census_.push_back({iteration, at.chunk, at.microbatch, at.segment,
                              mark.live_bytes - start_bytes, level->live_bytes,
                              level->segment_bytes});
  }
}

IterationRecord Trainer::RunIteration(int64_t iteration, std::vector<TensorDump>* dumps) {
  if (iteration != position_.iteration + 1) {
    throw InfrastructureError("rank " + std::to_string(layout_.rank) + " was asked for iteration " +
                              std::to_string(iteration) + " after " +
                              std::to_string(position_.iteration) + " iterations");
  }
  const auto start = std::chrono::steady_clock::now();
  ParameterStore& params = model_->parameters();
  MemoryTracker::ResetPeak();
  MemoryTimeline::SetIteration(iteration);
  NodeProbes::SetIteration(iteration);
  MemoryTimeline::Mark("iteration start");
  const int64_t start_bytes = MemoryTracker::current_bytes();
  ep_comm_->ResetStats();
  if (pp_comm_) pp_comm_->ResetStats();
  params.ZeroMainGrads();
  std::vector<MicrobatchLosses> losses;
  FlopCount flops;
  {
    FlopCounter counter;
    std::vector<ChunkState> microbatches = MakeMicrobatches(iteration, position_.data_batches + 1);
    losses = engine_->RunIteration(microbatches);
    flops = counter.Take();
  }
  RecordReplayCensus(iteration, start_bytes);
  ReduceDataParallelGrads();
  SumEmbeddingCopies();
  ApplyPerturbation(iteration);

  IterationRecord record;
  record.iteration = iteration;
  RecordFlopsAndComm(flops, &record);
  RecordGradients(&record, dumps);
  ClipAndStep(&record);
  position_.iteration = iteration;
  ++position_.data_batches;
  record.optimizer_steps = position_.optimizer_steps;
  record.lr_steps = position_.lr_steps;
  record.data_batches = position_.data_batches;
  RecordLosses(losses, &record);
  record.peak_bytes = MemoryTracker::peak_bytes();
  record.end_bytes = MemoryTracker::current_bytes();
  record.step_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return record;
}

void Trainer::RecordFlopsAndComm(const FlopCount& flops, IterationRecord* record) {
  record->gemm_flops_forward = flops.of(FlopPass::kForward);
  record->gemm_flops_replay = flops.of(FlopPass::kReplay);
  record->gemm_flops_backward = flops.of(FlopPass::kBackward);
  record->gemm_flops_attention = flops.of(GemmCategory::kAttention);
  record->gemm_flops_dense = flops.of(GemmCategory::kDense);
  record->gemm_flops_expert = flops.of(GemmCategory::kExpert);
  record->gemm_flops_head = flops.of(GemmCategory::kHead);
  record->gemm_flops_other = flops.of(GemmCategory::kOther);
  // stats() merges the iteration's intervals (on GPUs, waits for their events): once each.
  const CommStats& comm = ep_comm_->stats();
  record->comm_seconds = comm.in_flight_seconds;
  record->comm_exposed_seconds = comm.exposed_seconds;
  record->comm_count_exchange_seconds = comm.count_exchange_seconds;
  record->comm_count = comm.count;
  if (pp_comm_) {
    const TransferStats& p2p = pp_comm_->stats().p2p;
    record->p2p_count = p2p.count;
    record->p2p_bytes = p2p.bytes;
    record->p2p_exposed_seconds = p2p.exposed_seconds;
  }
}

void Trainer::RecordGradients(IterationRecord* record, std::vector<TensorDump>* dumps) {
  const auto record_start = std::chrono::steady_clock::now();
  for (const Parameter& p : model_->parameters().all()) {
    at::Tensor grad = p.main_grad.cpu().contiguous();
    record->grad_digests.push_back(TensorDigest(grad));
    if (dumps) {
      TensorDump dump;
      dump.name = p.name;
      dump.shape = grad.sizes().vec();
      const float* data = grad.data_ptr<float>();
      dump.values.assign(data, data + grad.numel());
      dumps->push_back(std::move(dump));
    }
  }
  record->record_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - record_start).count();
}

// The gradient norm before clipping, the clipped main grads, the step at the iteration's learning
// rate, and every master parameter's digest after it.
void Trainer::ClipAndStep(IterationRecord* record) {
  ParameterStore& params = model_->parameters();
  record->grad_norm = GlobalGradNorm();
  const double clip = recipe_.train.clip_grad;
  if (clip > 0) {
    const double coefficient = clip / (record->grad_norm + 1e-6);
    if (coefficient < 1.0) {
      for (Parameter& p : params.all()) p.main_grad.mul_(coefficient);
    }
  }
  record->learning_rate = optimizer_->LearningRate(++position_.lr_steps);
  MemoryTimeline::Mark("gradient reduction and norm");
  optimizer_->Step(++position_.optimizer_steps, record->learning_rate);
  MemoryTimeline::Mark("optimizer step");
  const auto record_start = std::chrono::steady_clock::now();
  record->param_digests = MasterDigests();
  record->record_seconds +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - record_start).count();
}

void Trainer::RecordLosses(const std::vector<MicrobatchLosses>& losses, IterationRecord* record) {
  // Loss terms: this pipeline's means in microbatch order (the loss stage's values, and the aux
  // losses of every stage's layers, layer by layer); the global loss summed in EP rank order.
  const double microbatches = static_cast<double>(losses.size());
  const int64_t model_layers = recipe_.model.layers + recipe_.model.mtp_layers;
  std::vector<double> loss_terms(4, 0.0);  // lm, mtp, mtp terms, objective
  std::vector<double> aux_by_layer;        // [microbatch][layer]; NaN: not a local MoE layer
  for (const MicrobatchLosses& l : losses) {
    loss_terms[0] += l.lm_loss;
    loss_terms[3] += l.objective_value;
    for (float v : l.mtp_losses) {
      loss_terms[1] += v;
      loss_terms[2] += 1;
    }
    for (int64_t layer = 0; layer < model_layers; ++layer) {
      const auto it = l.aux_losses.find(layer);
      aux_by_layer.push_back(it == l.aux_losses.end() ? std::nan("") : it->second);
    }
  }
  if (pp_comm_) {
    // The loss stage's terms; each layer's aux loss from the one rank that holds the layer.
    const int64_t loss_rank = layout_.pipeline.stages.back().pp_rank;
    loss_terms = ToDoubles(pp_comm_->AllGather(at::tensor(loss_terms, at::kDouble))[loss_rank]);
    for (const at::Tensor& part : pp_comm_->AllGather(at::tensor(aux_by_layer, at::kDouble))) {
      const std::vector<double> theirs = ToDoubles(part);
      for (size_t i = 0; i < theirs.size(); ++i) {
        if (!std::isnan(theirs[i])) aux_by_layer[i] = theirs[i];
      }
    }
  }
  double aux = 0;
  for (double v : aux_by_layer) {
    if (!std::isnan(v)) aux += v;
  }
  record->lm_loss = static_cast<float>(loss_terms[0] / microbatches);
  const double mtp_terms = loss_terms[2];
  record->mtp_loss = mtp_terms > 0 ? static_cast<float>(loss_terms[1] / mtp_terms) : 0.0f;
  record->aux_loss = static_cast<float>(aux / microbatches);
  double global = 0;
  for (const at::Tensor& part : ep_comm_->AllGather(at::full({1}, loss_terms[3], at::kDouble))) {
    global += part.item<double>();
  }
  record->loss = static_cast<float>(global / (microbatches * static_cast<double>(layout_.dp_size)));
}

}  // namespace bitparity

#ifndef BITPARITY_CONFIG_RECIPE_H_
#define BITPARITY_CONFIG_RECIPE_H_

// A recipe is one TOML file describing one scenario: the model, the parallel layout, the
// training run, precision, recompute, what the trace dumps, and the arms (engines) to run.
// Loading validates everything before any work starts; every problem is reported with the file,
// table and key, and the whole set of problems raises one InputError (exit code 2).
// Each member's recipe key, range and meaning are in the key tables of config/recipe_schema.cpp;
// the member initializers below are the defaults.

#include <cstdint>
#include <string>
#include <vector>

#include "numerics/cpu_isa.h"
#include "schedule/pipeline_layout.h"

namespace bitparity {

enum class EngineKind { kReference, kOverlap, kExternal };
enum class Dispatcher { kAllToAll, kFlex };
enum class PrecisionRecipe { kFp32, kBf16, kBlockwise, kMxfp8 };
enum class Fp8Scaling { kCurrent, kDelayed };
// How FP8 GEMMs run: quantize-dequantize in software with bf16 GEMMs (any device), or FP8
// tensor-core GEMMs on the quantized operands (cuda, sm_90 for blockwise).
enum class Fp8Backend { kEmulated, kNative };
// Where a rank's tensors live and computes run.
enum class DeviceKind { kCpu, kCuda };
enum class RecomputeGranularity { kNone, kFull };
enum class RecomputeMethod { kUniform, kBlock };
// What a full-recompute replay covers: one layer segment (per recompute_num_layers) or the whole
// model chunk at once (the older overlap behaviour, kept as a comparison arm for memory).
enum class RecomputeUnit { kSegment, kChunk };
enum class LrSchedule { kConstant, kCosine };

const char* ToString(EngineKind engine);
const char* ToString(Dispatcher dispatcher);
const char* ToString(PrecisionRecipe recipe);
const char* ToString(Fp8Scaling scaling);
const char* ToString(Fp8Backend backend);
const char* ToString(DeviceKind device);
const char* ToString(RecomputeGranularity granularity);
const char* ToString(RecomputeMethod method);
const char* ToString(RecomputeUnit unit);
const char* ToString(LrSchedule schedule);

struct ModelConfig {
  int64_t hidden = 64;
  int64_t heads = 4;
  int64_t layers = 3;         // decoder layers
  int64_t first_k_dense = 1;  // the first k decoder layers use a dense MLP, the rest MoE
  int64_t experts = 4;
  int64_t topk = 2;
  int64_t moe_ffn = 64;  // hidden size of each expert's SwiGLU
  int64_t ffn = 128;     // hidden size of the dense SwiGLU
  int64_t vocab = 256;
  int64_t seq_len = 64;
  int64_t mtp_layers = 0;  // multi-token-prediction depths after the decoder
  double mtp_loss_scale = 0.1;
  double aux_loss_coeff = 1e-2;
  double norm_eps = 1e-6;
  double rope_theta = 10000.0;
  double init_std = 0.02;
  // Dropout probabilities: hidden dropout on the attention and MLP outputs, and dropout on the
  // attention probabilities. Each mask is a pure function of (seed, iteration, DP rank,
  // microbatch, layer, site), so replays, arms and schedules draw the same masks.
  double dropout = 0.0;
  double attention_dropout = 0.0;
  Dispatcher dispatcher = Dispatcher::kAllToAll;
  std::string pipeline_layout;  // Megatron's --pipeline-model-parallel-layout; "": even split
  // mHC (model/mhc.h): residual streams (0: off; Megatron's default when on is 4), Sinkhorn-Knopp
  // iterations of the residual mixing matrix, and the initial gating of the mapping logits.
  int64_t mhc_streams = 0;
  int64_t mhc_sinkhorn_iterations = 20;
  double mhc_init_gating_factor = 0.01;

  int64_t head_dim() const { return hidden / heads; }
  bool mhc() const { return mhc_streams > 0; }
  // The width of the residual stream between layers: hidden, or n x hidden under mHC.
  int64_t residual_width() const { return mhc() ? mhc_streams * hidden : hidden; }
  bool layer_is_moe(int64_t layer) const { return layer >= first_k_dense; }
  // The MTP transformer layer follows the spec of the last decoder layer.
  bool mtp_is_moe() const { return layer_is_moe(layers - 1); }
};

// The model's parameter count (all ranks together, the MTP stage's embedding copy not counted).
int64_t ParameterCount(const ModelConfig& model);

struct ParallelConfig {
  DeviceKind device = DeviceKind::kCpu;  // "cuda": each rank uses the GPU of its LOCAL_RANK
  int64_t ep = 1;                        // expert-parallel size within each pipeline stage
  int64_t pp = 1;                        // pipeline stages (ranks of one pipeline)
  int64_t vpp = 1;                       // model chunks per pipeline rank
  bool vpp_set = false;                  // the recipe wrote vpp (it must then match the layout)
  int64_t microbatch_group_size = 0;     // interleaved: microbatches per group; 0: pp
  int64_t threads = 1;                   // intra-op threads per rank
  CpuIsa cpu_isa = CpuIsa::kAvx2;        // the CPU instruction-set level every library pins
  double timeout_seconds = 300;          // a rank group running longer than this is ended (exit 3)
};

struct DataConfig {
  int64_t branching = 4;  // successors per token in the synthetic Markov chain
  // Shortest sample: each sample's length is drawn from [min_length, seq_len] and the sample is
  // padded to seq_len; 0 (the default): every sample fills seq_len.
  int64_t min_length = 0;

  bool padded(int64_t seq_len) const { return min_length > 0 && min_length < seq_len; }
};

struct TrainConfig {
  int64_t micro_batch = 2;
  int64_t global_batch = 8;
  int64_t iterations = 10;
  uint64_t seed = 1234;
  double lr = 3e-3;
  double min_lr = 0.0;
  int64_t warmup_iterations = 0;
  LrSchedule lr_schedule = LrSchedule::kConstant;
  double adam_beta1 = 0.9;
  double adam_beta2 = 0.95;
  double adam_eps = 1e-8;
  double weight_decay = 0.0;
  double clip_grad = 1.0;  // global gradient-norm clipping; 0 turns it off
  // Restart replay: run 1 of every arm saves a checkpoint after each of these iterations (sorted,
  // each < iterations), and a run resumed from each must equal run 1 from there on; with
  // resume_across_arms, every other arm also resumes from the baseline's checkpoint.
  std::vector<int64_t> checkpoint_at;
  bool resume_across_arms = false;
};

struct PrecisionConfig {
  PrecisionRecipe recipe = PrecisionRecipe::kBf16;
  Fp8Scaling fp8_scaling = Fp8Scaling::kCurrent;
  Fp8Backend fp8_backend = Fp8Backend::kEmulated;  // used by the FP8 recipes only

  bool fp8() const {
    return recipe == PrecisionRecipe::kBlockwise || recipe == PrecisionRecipe::kMxfp8;
  }
  bool native_fp8() const { return fp8() && fp8_backend == Fp8Backend::kNative; }
};

struct RecomputeConfig {
  RecomputeGranularity granularity = RecomputeGranularity::kNone;
  RecomputeMethod method = RecomputeMethod::kUniform;
  int64_t num_layers = 0;  // 0 = unset
  RecomputeUnit unit = RecomputeUnit::kSegment;
  bool method_set = false;

  bool full() const { return granularity == RecomputeGranularity::kFull; }
};

struct TraceConfig {
  std::vector<int64_t> dump_grads_at;  // 1-based iterations at which full main grads are dumped
  bool node_probes = false;            // probes = "nodes": a digest at every schedule operation
};

// How two values of a quantity must agree across arms: bit for bit, or within a tolerance
// (|a - b| <= atol + rtol * |b|, or at most `ulps` units in the last place).
struct Tolerance {
  enum class Kind { kBitwise, kAbsRel, kUlps };
  Kind kind = Kind::kBitwise;
  double atol = 0;
  double rtol = 0;
  int64_t ulps = 0;

  bool bitwise() const { return kind == Kind::kBitwise; }
  std::string Describe() const;
};

// A gate on peak memory: peak(arm) <= at_most x peak(of).
struct MemoryBound {
  std::string arm;
  std::string of;
  double at_most = 1.0;
};

// A gate on the all-to-all overlap: at least `hidden_at_least` of the arm's all-to-all time (in
// flight, start to completion) ran while the rank computed something else, that is, was not
// waited for. Checked on every run of the arm; the worst run decides.
struct OverlapBound {
  std::string arm;
  double hidden_at_least = 0.5;
};

// The cross-arm comparison policy ([compare]).
struct ComparePolicy {
  std::string baseline;  // the arm every other arm is compared with; its traces are the goldens
  Tolerance loss;        // loss, lm_loss, mtp_loss, aux_loss
  Tolerance gradients;   // grad norm and every main grad (tolerances use the dumped tensors)
  Tolerance params;      // parameters after the step (tolerances use the learning rate only)
  std::vector<MemoryBound> memory;
  std::vector<OverlapBound> overlap;
  double memory_model = 0;  // > 0: every arm's peak within this relative error of the model
  // The baseline's peak bytes of every rank and iteration within this relative distance of its
  // golden's (0: equal).
  double golden_memory = 0.05;
};

// One arm: an engine with its own recompute / precision / dispatcher settings.
struct ArmConfig {
  std::string name;
  EngineKind engine = EngineKind::kReference;
  RecomputeConfig recompute;
  PrecisionConfig precision;
  Dispatcher dispatcher = Dispatcher::kAllToAll;
  // Delayed weight gradients (Megatron's --delay-wgrad-compute; overlap engine only).
  bool delay_wgrad = false;
  // An external arm (engine kExternal): the program that trains it, as an argv (no shell), run
  // once per rank with the recipe's folder as its working directory (docs/external-arms.md).
  std::vector<std::string> command;
  // Where `recompute` and `precision` were read, as messages name it: the arm's own sub-table
  // when it overrides them, else the top-level table and the arm ("[recompute] (arm 'x')").
  std::string recompute_table;
  std::string precision_table;
};

struct Recipe {
  std::string path;  // as given by the user; used in every message
  std::string name;  // `name` key, or the file stem
  std::string text;  // the file content, recorded verbatim in traces
  ModelConfig model;
  ParallelConfig parallel;
  DataConfig data;
  TrainConfig train;
  PrecisionConfig precision;
  RecomputeConfig recompute;
  TraceConfig trace;
  std::vector<ArmConfig> arms;
  ComparePolicy compare;

  int64_t world_size() const { return parallel.pp * parallel.ep; }
  int64_t data_parallel_size() const { return parallel.ep; }
  int64_t microbatches_per_rank() const { return global_batch_per_rank() / train.micro_batch; }
  int64_t global_batch_per_rank() const { return train.global_batch / data_parallel_size(); }

  // The arm called `name`; InputError naming the known arms if there is none.
  const ArmConfig& arm(const std::string& name) const;
  std::vector<std::string> arm_names() const;
  // The model `arm` trains: [model] with the arm's own settings (its dispatcher) applied.
  ModelConfig model_of(const ArmConfig& arm) const;
  // The pipeline stages: [model] pipeline_layout, or the layers split evenly over pp x vpp
  // (checked when the recipe was read).
  PipelineLayout pipeline() const;
};

// Parses and validates a recipe file. Throws InputError listing every problem found.
Recipe LoadRecipe(const std::string& path);

// The content digest of a recipe's text (16 hex digits of XXH3), recorded in every trace.
std::string RecipeDigest(const std::string& text);
// Same, from text already in memory; `path` is only used in messages.
Recipe ParseRecipe(const std::string& text, const std::string& path);

}  // namespace bitparity

#endif  // BITPARITY_CONFIG_RECIPE_H_

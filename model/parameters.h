#ifndef BITPARITY_MODEL_PARAMETERS_H_
#define BITPARITY_MODEL_PARAMETERS_H_

// The parameters of the MoE GPT on one rank: fp32 master weights that the optimizer updates,
// the compute-dtype weights autograd differentiates, and fp32 main-grad buffers into which each
// microbatch's gradients are flushed in a fixed order. Initialization depends on the recipe
// seed and the parameter's global name alone, so it is identical in both arms and for every
// EP layout (an expert's weights do not depend on which rank owns it).

#include <ATen/ATen.h>

#include <cstdint>
#include <string>
#include <vector>

#include "comm/rank_context.h"
#include "config/recipe.h"
#include "model/mhc.h"

namespace bitparity {

struct Parameter {
  std::string name;        // global name, e.g. "layers.1.mlp.experts.3.fc1"
  bool is_expert = false;  // sharded over EP: its gradient is not reduced over data parallel
  at::Tensor master;       // fp32 master weight
  at::Tensor weight;       // the leaf autograd sees (a bf16 copy, or the master itself in fp32)
  at::Tensor main_grad;    // fp32 gradient accumulated over microbatches
  int64_t stage = 0;       // the pipeline stage (virtual order) that holds it
  // The MTP stage's copy of the embedding: its gradient is summed with the first stage's, and
  // the global grad norm counts the embedding once (on the first stage).
  bool embedding_copy = false;
};

class ParameterStore {
 public:
  // Parameters live on `device`; their initial values are drawn on the CPU (so they are the same
  // bits on every device) and copied there.
  ParameterStore(at::ScalarType compute_dtype, uint64_t seed, at::Device device = at::kCPU)
      : compute_dtype_(compute_dtype), seed_(seed), device_(device) {}
  ParameterStore(const ParameterStore&) = delete;
  ParameterStore& operator=(const ParameterStore&) = delete;

  enum class Init { kNormal, kOnes };
  // Registers a parameter and returns its compute weight. `std` is used by kNormal.
  at::Tensor Add(const std::string& name, std::vector<int64_t> shape, Init init, double std,
                 bool is_expert);
  // Same, but the weight stays fp32 whatever the compute dtype (e.g. the router).
  at::Tensor AddFp32(const std::string& name, std::vector<int64_t> shape, double std);
  // An fp32 weight whose every element starts at `value` (mHC's gates and biases).
  at::Tensor AddFp32Constant(const std::string& name, std::vector<int64_t> shape, double value);
  // The pipeline stage the parameters added from now on belong to.
  void set_stage(int64_t stage) { stage_ = stage; }

  std::vector<Parameter>& all() { return params_; }
  const std::vector<Parameter>& all() const { return params_; }
  at::ScalarType compute_dtype() const { return compute_dtype_; }
  const at::Device& device() const { return device_; }

  // Sets every main grad to zero (start of an iteration).
  void ZeroMainGrads();
  // Adds each parameter's .grad (one microbatch's gradient) to its main grad in fp32 and clears
  // .grad, so that the next microbatch starts from an empty gradient (see DESIGN.md, parity).
  void FlushGradsToMainGrads();
  // Copies the fp32 masters into the compute weights after an optimizer step.
  void RefreshWeightsFromMasters();

 private:
  at::Tensor Register(const std::string& name, at::Tensor master, bool is_expert, bool keep_fp32);

  at::ScalarType compute_dtype_;
  uint64_t seed_;
  at::Device device_;
  std::vector<Parameter> params_;
  int64_t stage_ = 0;
};

// Views of the compute weights, grouped as the model uses them.
struct AttentionWeights {
  at::Tensor norm;  // [h]
  at::Tensor qkv;   // [3h, h]
  at::Tensor proj;  // [h, h]
};

struct DenseMlpWeights {
  at::Tensor norm;  // [h]
  at::Tensor fc1;   // [2 ffn, h] gate and up
  at::Tensor fc2;   // [h, ffn]
};

struct ExpertWeights {
  at::Tensor fc1;  // [2 moe_ffn, h]
  at::Tensor fc2;  // [h, moe_ffn]
};

struct MoeWeights {
  at::Tensor norm;                           // [h]
  at::Tensor router;                         // [experts, h], fp32
  std::vector<ExpertWeights> local_experts;  // this rank's experts, in global order
};

struct LayerWeights {
  int64_t index = 0;  // 0..layers-1 for decoder layers, layers+d for MTP depth d
  bool is_moe = false;
  AttentionWeights attention;
  DenseMlpWeights dense;
  MoeWeights moe;
  MhcWeights attention_mhc;  // under mHC: the mapping around the attention sublayer
  MhcWeights mlp_mhc;        // and around the MLP sublayer
};

struct MtpWeights {
  at::Tensor enorm;    // [h] norm of the shifted-token embedding
  at::Tensor hnorm;    // [h] norm of the previous hidden states
  at::Tensor eh_proj;  // [h, 2h]; under mHC undefined, and per stream:
  at::Tensor e_proj;   // [h, h] on the normed embedding
  at::Tensor h_proj;   // [h, h] on each normed stream, added to e_proj's output
  LayerWeights layer;
  at::Tensor final_norm;  // [h]; under mHC after the streams' mean
};

// The weights this rank holds, by their place in the whole model: with pipeline parallelism the
// pieces of other ranks' stages stay undefined (layers[l].attention.qkv undefined, head
// undefined, ...).
struct GptWeights {
  at::Tensor embedding;  // [vocab, h]; on the first stage, and copied on an MTP stage
  std::vector<LayerWeights> layers;
  at::Tensor final_norm;  // [h]; under mHC after the decoder streams' mean
  at::Tensor head;        // [vocab, h], untied from the embedding
  std::vector<MtpWeights> mtp;
};

// Creates the parameters of this rank's pipeline stages (`layout.pipeline`; all of the model
// when it is empty) in `store`, in a fixed order (the order of digests in traces): per chunk the
// embedding, decoder layers, final norm, MTP layers and head it holds. Returns the grouped views.
GptWeights BuildGptWeights(const ModelConfig& config, const ParallelLayout& layout,
                           ParameterStore* store);

}  // namespace bitparity

#endif  // BITPARITY_MODEL_PARAMETERS_H_

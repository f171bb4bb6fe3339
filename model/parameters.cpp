#include "model/parameters.h"

#include <torch/torch.h>

#include <cmath>

#include "numerics/random.h"

namespace bitparity {

at::Tensor ParameterStore::Register(const std::string& name, at::Tensor master, bool is_expert,
                                    bool keep_fp32) {
  Parameter p;
  p.name = name;
  p.is_expert = is_expert;
  p.master = master.to(device_);
  if (keep_fp32 || compute_dtype_ == at::kFloat) {
    p.weight = p.master;
  } else {
    p.weight = p.master.to(compute_dtype_);
  }
  p.weight.requires_grad_(true);
  p.main_grad = at::zeros_like(p.master);
  p.stage = stage_;
  params_.push_back(p);
  return params_.back().weight;
}

at::Tensor ParameterStore::Add(const std::string& name, std::vector<int64_t> shape, Init init,
                               double std, bool is_expert) {
  at::Tensor master = at::empty(shape, at::kFloat);
  float* data = master.data_ptr<float>();
  const int64_t n = master.numel();
  if (init == Init::kOnes) {
    for (int64_t i = 0; i < n; ++i) data[i] = 1.0f;
  } else {
    Rng rng(seed_, "init." + name);
    for (int64_t i = 0; i < n; ++i) data[i] = static_cast<float>(rng.Normal() * std);
  }
  return Register(name, master, is_expert, /*keep_fp32=*/false);
}

at::Tensor ParameterStore::AddFp32(const std::string& name, std::vector<int64_t> shape,
                                   double std) {
  at::Tensor master = at::empty(shape, at::kFloat);
  float* data = master.data_ptr<float>();
  Rng rng(seed_, "init." + name);
  for (int64_t i = 0; i < master.numel(); ++i) data[i] = static_cast<float>(rng.Normal() * std);
  return Register(name, master, /*is_expert=*/false, /*keep_fp32=*/true);
}

at::Tensor ParameterStore::AddFp32Constant(const std::string& name, std::vector<int64_t> shape,
                                           double value) {
  return Register(name, at::full(shape, value, at::kFloat), /*is_expert=*/false,
                  /*keep_fp32=*/true);
}

void ParameterStore::ZeroMainGrads() {
  for (Parameter& p : params_) p.main_grad.zero_();
}

void ParameterStore::FlushGradsToMainGrads() {
  torch::NoGradGuard no_grad;
  for (Parameter& p : params_) {
    const at::Tensor& grad = p.weight.grad();
    if (!grad.defined()) continue;
    p.main_grad.add_(grad.to(at::kFloat));
    p.weight.mutable_grad() = at::Tensor();
  }
}

void ParameterStore::RefreshWeightsFromMasters() {
  torch::NoGradGuard no_grad;
  for (Parameter& p : params_) {
    if (!p.weight.is_same(p.master)) p.weight.copy_(p.master);
  }
}

namespace {

// The mapping of one sublayer: Xavier-normal projection, gates at the gating factor, zero bias.
MhcWeights BuildMhc(const ModelConfig& c, ParameterStore* store, const std::string& prefix) {
  const int64_t n = c.mhc_streams, rows = n * n + 2 * n, cols = n * c.hidden;
  MhcWeights w;
  w.mapping = store->AddFp32(prefix + ".mapping", {rows, cols},
                             std::sqrt(2.0 / static_cast<double>(rows + cols)));
  w.alpha_pre = store->AddFp32Constant(prefix + ".alpha_pre", {1}, c.mhc_init_gating_factor);
  w.alpha_post = store->AddFp32Constant(prefix + ".alpha_post", {1}, c.mhc_init_gating_factor);
  w.alpha_res = store->AddFp32Constant(prefix + ".alpha_res", {1}, c.mhc_init_gating_factor);
  w.bias = store->AddFp32Constant(prefix + ".bias", {rows}, 0.0);
  return w;
}

LayerWeights BuildLayer(const ModelConfig& c, const ParallelLayout& layout, ParameterStore* store,
                        const std::string& prefix, int64_t index, bool is_moe) {
  using Init = ParameterStore::Init;
  const int64_t h = c.hidden;
  // Output projections use Megatron's scaled init: std / sqrt(2 * layers).
  const double out_std = c.init_std / std::sqrt(2.0 * static_cast<double>(c.layers));
  LayerWeights w;
  w.index = index;
  w.is_moe = is_moe;
  w.attention.norm = store->Add(prefix + ".attention.norm", {h}, Init::kOnes, 0, false);
  w.attention.qkv =
      store->Add(prefix + ".attention.qkv", {3 * h, h}, Init::kNormal, c.init_std, false);
  w.attention.proj = store->Add(prefix + ".attention.proj", {h, h}, Init::kNormal, out_std, false);
  if (c.mhc()) {
    w.attention_mhc = BuildMhc(c, store, prefix + ".attention.mhc");
    w.mlp_mhc = BuildMhc(c, store, prefix + ".mlp.mhc");
  }
  if (!is_moe) {
    w.dense.norm = store->Add(prefix + ".mlp.norm", {h}, Init::kOnes, 0, false);
    w.dense.fc1 = store->Add(prefix + ".mlp.fc1", {2 * c.ffn, h}, Init::kNormal, c.init_std, false);
    w.dense.fc2 = store->Add(prefix + ".mlp.fc2", {h, c.ffn}, Init::kNormal, out_std, false);
    return w;
  }
  w.moe.norm = store->Add(prefix + ".mlp.norm", {h}, Init::kOnes, 0, false);
  w.moe.router = store->AddFp32(prefix + ".mlp.router", {c.experts, h}, c.init_std);
  for (int64_t i = 0; i < layout.experts_per_rank; ++i) {
    const int64_t e = layout.first_local_expert() + i;
    const std::string expert = prefix + ".mlp.experts." + std::to_string(e);
    ExpertWeights ew;
    ew.fc1 = store->Add(expert + ".fc1", {2 * c.moe_ffn, h}, Init::kNormal, c.init_std, true);
    ew.fc2 = store->Add(expert + ".fc2", {h, c.moe_ffn}, Init::kNormal, out_std, true);
    w.moe.local_experts.push_back(ew);
  }
  return w;
}

}  // namespace

GptWeights BuildGptWeights(const ModelConfig& c, const ParallelLayout& layout,
                           ParameterStore* store) {
  using Init = ParameterStore::Init;
  const PipelineLayout pipeline = layout.pipeline.stages.empty()
                                      ? EvenPipelineLayout(1, 1, c.layers, c.mtp_layers)
                                      : layout.pipeline;
  GptWeights w;
  w.layers.resize(static_cast<size_t>(c.layers));
  w.mtp.resize(static_cast<size_t>(c.mtp_layers));
  // A stage's pieces in model order; the chunks of this rank in chunk order. An MTP stage
  // without the embedding holds a copy of it (same name, same initial values), as Megatron's
  // MTP stage does; the copies' gradients are summed across the pipeline after each step.
  for (int64_t chunk = 0; chunk < pipeline.vpp; ++chunk) {
    const PipelineStage& stage = pipeline.stage(layout.pp_rank, chunk);
    store->set_stage(stage.index);
    if (stage.embedding || (stage.mtp_layers > 0 && !w.embedding.defined())) {
      w.embedding = store->Add("embedding", {c.vocab, c.hidden}, Init::kNormal, c.init_std, false);
      store->all().back().embedding_copy = !stage.embedding;
    }
    for (int64_t l = stage.first_layer; l < stage.first_layer + stage.layers; ++l) {
      w.layers[static_cast<size_t>(l)] =
          BuildLayer(c, layout, store, "layers." + std::to_string(l), l, c.layer_is_moe(l));
    }
    if (stage.final_norm) {
      w.final_norm = store->Add("final_norm", {c.hidden}, Init::kOnes, 0, false);
    }
    for (int64_t d = stage.first_mtp; d < stage.first_mtp + stage.mtp_layers; ++d) {
      const std::string prefix = "mtp." + std::to_string(d);
      MtpWeights m;
      m.enorm = store->Add(prefix + ".enorm", {c.hidden}, Init::kOnes, 0, false);
      m.hnorm = store->Add(prefix + ".hnorm", {c.hidden}, Init::kOnes, 0, false);
      if (c.mhc()) {
        m.e_proj =
            store->Add(prefix + ".e_proj", {c.hidden, c.hidden}, Init::kNormal, c.init_std, false);
        m.h_proj =
            store->Add(prefix + ".h_proj", {c.hidden, c.hidden}, Init::kNormal, c.init_std, false);
      } else {
        m.eh_proj = store->Add(prefix + ".eh_proj", {c.hidden, 2 * c.hidden}, Init::kNormal,
                               c.init_std, false);
      }
      m.layer = BuildLayer(c, layout, store, prefix + ".layer", c.layers + d, c.mtp_is_moe());
      m.final_norm = store->Add(prefix + ".final_norm", {c.hidden}, Init::kOnes, 0, false);
      w.mtp[static_cast<size_t>(d)] = m;
    }
    if (stage.loss)
      w.head = store->Add("head", {c.vocab, c.hidden}, Init::kNormal, c.init_std, false);
  }
  return w;
}

}  // namespace bitparity

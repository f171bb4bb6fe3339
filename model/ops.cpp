#include "model/ops.h"

#include <torch/torch.h>

#include <cmath>
#include <limits>
#include <stdexcept>

#include "core/cuda_support.h"
#include "core/errors.h"
#include "model/fp8_linear.h"
#include "model/gemm.h"
#include "numerics/flop_count.h"

namespace bitparity {
namespace ops {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

thread_local DelayedWgrads* delayed_wgrad_sink = nullptr;

class RmsNormFunction : public torch::autograd::Function<RmsNormFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight,
                            double eps) {
    at::Tensor xf = x.to(at::kFloat);
    at::Tensor rstd = at::rsqrt(xf.pow(2).mean(-1, /*keepdim=*/true) + eps);
    at::Tensor y = (xf * rstd * weight.to(at::kFloat)).to(x.scalar_type());
    ctx->save_for_backward({x, weight, rstd});
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    variable_list saved = ctx->get_saved_variables();
    const at::Tensor& x = saved[0];
    const at::Tensor& weight = saved[1];
    const at::Tensor& rstd = saved[2];
    at::Tensor gy = grads[0].to(at::kFloat);
    at::Tensor xhat = x.to(at::kFloat) * rstd;
    at::Tensor wg = gy * weight.to(at::kFloat);
    at::Tensor dx = rstd * (wg - xhat * (wg * xhat).mean(-1, /*keepdim=*/true));
    at::Tensor dw = (gy * xhat).reshape({-1, x.size(-1)}).sum(0);
    return {dx.to(x.scalar_type()), dw.to(weight.scalar_type()), at::Tensor()};
  }
};

class AuxLossScaler : public torch::autograd::Function<AuxLossScaler> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& probs,
                            const at::Tensor& aux_loss, double grad_scale) {
    ctx->saved_data["grad_scale"] = grad_scale;
    ctx->saved_data["aux_dtype"] = static_cast<int64_t>(aux_loss.scalar_type());
    ctx->saved_data["aux_device"] = aux_loss.device();
    return probs;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    double scale = ctx->saved_data["grad_scale"].toDouble();
    auto dtype = static_cast<at::ScalarType>(ctx->saved_data["aux_dtype"].toInt());
    const at::Device device = ctx->saved_data["aux_device"].toDevice();
    return {grads[0], at::full({}, scale, at::TensorOptions().dtype(dtype).device(device)),
            at::Tensor()};
  }
};

class FanoutFunction : public torch::autograd::Function<FanoutFunction> {
 public:
  static variable_list forward(AutogradContext*, const at::Tensor& x, int64_t count) {
    variable_list copies;
    for (int64_t i = 0; i < count; ++i) copies.push_back(x.clone());
    return copies;
  }

  static variable_list backward(AutogradContext*, variable_list grads) {
    at::Tensor sum;
    for (const at::Tensor& g : grads) {
      if (!g.defined()) continue;
      sum = sum.defined() ? sum + g : g;
    }
    return {sum, at::Tensor()};
  }
};

// A bf16 / fp32 linear layer on the active GEMM path (model/gemm.h) whose weight gradient goes
// to a DelayedWgrads while a DelayWgradScope is alive. Forward and backward run the GEMMs
// autograd runs for at::linear without bias (matmul folds the leading dimensions into one mm with
// the transposed weight; MmBackward0's mm_mat1_backward / mm_mat2_backward, then the transpose's
// backward), with the same operands in the same layouts: on the native path, the same bits.
class LinearFunction : public torch::autograd::Function<LinearFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight) {
    const at::Tensor x2 = SaveLinearInputs(ctx, x, weight);
    ctx->saved_data["x_shape"] = x.sizes().vec();
    return gemm::Multiply(x2, weight.t()).view(WithLastDimension(x.sizes(), weight.size(0)));
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const SavedLinear saved = SavedLinearOf(ctx);
    const at::Tensor& x2 = saved.x2;
    const at::Tensor& weight = saved.weight;
    const at::Tensor g = grads[0].reshape({-1, weight.size(0)});
    const at::Tensor mat2 = weight.t();  // what the forward's mm multiplied by
    at::Tensor dx;
    if (ctx->needs_input_grad(0)) {
      // mm_mat1_backward: a column-major input gets its gradient column-major.
      const bool column_major = x2.stride(0) == 1 && x2.stride(1) == x2.size(0);
      dx = column_major ? gemm::Multiply(mat2, g.t()).t() : gemm::Multiply(g, mat2.t());
      dx = dx.reshape(ctx->saved_data["x_shape"].toIntVector());
    }
    // mm_mat2_backward of the transposed weight, then the transpose's backward.
    auto wgrad = [g, x2, mat2] {
      const bool column_major = mat2.stride(0) == 1 && mat2.stride(1) == mat2.size(0);
      return (column_major ? gemm::Multiply(g.t(), x2).t() : gemm::Multiply(x2.t(), g)).t();
    };
    at::Tensor dw;
    if (ctx->needs_input_grad(1)) {
      dw = WeightGradientNowOrLater(saved.wgrad_sink, weight, std::move(wgrad));
    }
    return {dx, dw};
  }
};

at::Tensor ApplyRope(const at::Tensor& x, const RopeTables& rope) {
  const int64_t half = x.size(-1) / 2;
  at::Tensor xf = x.to(at::kFloat);
  at::Tensor x1 = xf.narrow(-1, 0, half);
  at::Tensor x2 = xf.narrow(-1, half, half);
  at::Tensor out = at::cat({x1 * rope.cos - x2 * rope.sin, x2 * rope.cos + x1 * rope.sin}, -1);
  return out.to(x.scalar_type());
}

}  // namespace

void DelayedWgrads::Push(const at::Tensor& weight, std::function<at::Tensor()> compute) {
  std::lock_guard<std::mutex> lock(mutex_);
  pending_.push_back({weight, std::move(compute)});
}

void DelayedWgrads::Run() {
  RunSelected([](const at::Tensor&) { return true; });
}

void DelayedWgrads::RunSelected(const std::function<bool(const at::Tensor& weight)>& selects) {
  std::vector<Pending> pending;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<Pending> kept;
    for (Pending& p : pending_) (selects(p.weight) ? pending : kept).push_back(std::move(p));
    pending_.swap(kept);
  }
  torch::NoGradGuard no_grad;
  for (Pending& p : pending) {
    at::Tensor dw = p.compute();
    at::Tensor& grad = p.weight.mutable_grad();
    if (grad.defined()) {
      grad.add_(dw);
    } else {
      grad = std::move(dw);
    }
  }
}

bool DelayedWgrads::empty() const { return size() == 0; }

size_t DelayedWgrads::size() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return pending_.size();
}

DelayWgradScope::DelayWgradScope(DelayedWgrads* sink) : previous_(delayed_wgrad_sink) {
  delayed_wgrad_sink = sink;
}
DelayWgradScope::~DelayWgradScope() { delayed_wgrad_sink = previous_; }

int64_t CurrentWgradSinkHandle() {
  return static_cast<int64_t>(reinterpret_cast<intptr_t>(delayed_wgrad_sink));
}

DelayedWgrads* WgradSinkOf(int64_t handle) {
  return reinterpret_cast<DelayedWgrads*>(static_cast<intptr_t>(handle));
}

at::Tensor SaveLinearInputs(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight) {
  const at::Tensor x2 = x.reshape({-1, x.size(-1)});
  ctx->save_for_backward({x2, weight});
  ctx->saved_data["wgrad_sink"] = CurrentWgradSinkHandle();
  return x2;
}

SavedLinear SavedLinearOf(AutogradContext* ctx) {
  const variable_list saved = ctx->get_saved_variables();
  return {saved[0], saved[1], ctx->saved_data["wgrad_sink"].toInt()};
}

std::vector<int64_t> WithLastDimension(at::IntArrayRef sizes, int64_t last) {
  std::vector<int64_t> shape = sizes.vec();
  shape.back() = last;
  return shape;
}

at::Tensor WeightGradientNowOrLater(int64_t sink_handle, const at::Tensor& weight,
                                    std::function<at::Tensor()> compute) {
  if (DelayedWgrads* sink = WgradSinkOf(sink_handle)) {
    sink->Push(weight, std::move(compute));
    return at::Tensor();
  }
  return compute();
}

at::Tensor RmsNorm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  return RmsNormFunction::apply(x, weight, eps);
}

at::Tensor CompositeRmsNorm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  at::Tensor xf = x.to(at::kFloat);  // no node in fp32: xf is x, used by pow and by mul
  return (xf * at::rsqrt(xf.pow(2).mean(-1, true) + eps) * weight.to(at::kFloat))
      .to(x.scalar_type());
}

namespace {

int BackwardProducts(const at::Tensor& a, const at::Tensor& b) {
  if (!torch::GradMode::is_enabled()) return 0;
  return (a.requires_grad() ? 1 : 0) + (b.requires_grad() ? 1 : 0);
}

}  // namespace

void CountLinearFlops(const at::Tensor& x, const at::Tensor& weight) {
  if (FlopCounter::current() == nullptr) return;
  const int64_t k = x.size(-1);
  FlopCounter::CountGemm(1, k == 0 ? 0 : x.numel() / k, weight.size(0), k,
                         BackwardProducts(x, weight));
}

void CountMatmulFlops(const at::Tensor& a, const at::Tensor& b) {
  if (FlopCounter::current() == nullptr) return;
  const int64_t m = a.size(-2), k = a.size(-1), n = b.size(-1);
  FlopCounter::CountGemm(m * k == 0 ? 0 : a.numel() / (m * k), m, n, k, BackwardProducts(a, b));
}

at::Tensor Linear(const at::Tensor& x, const at::Tensor& weight, const PrecisionConfig& precision) {
  CountLinearFlops(x, weight);
  switch (precision.recipe) {
    case PrecisionRecipe::kFp32:
    case PrecisionRecipe::kBf16:
      return LinearFunction::apply(x, weight);
    case PrecisionRecipe::kBlockwise:
    case PrecisionRecipe::kMxfp8:
      return Fp8Linear(x, weight, precision);
  }
  throw std::logic_error("Linear: unknown precision recipe");
}

void CheckNativeFp8Support(const PrecisionConfig& precision, const at::Device& device,
                           const std::string& where) {
  if (!precision.native_fp8()) return;
  const std::string prefix =
      where + " fp8_backend \"native\" with recipe \"" + ToString(precision.recipe) + "\" ";
  const std::string way_out = "; use fp8_backend = \"emulated\" to run it here";
  if (!device.is_cuda()) {
    throw InputError(prefix + "needs a GPU, and this rank runs on " + device.str() + way_out);
  }
  const cuda::DeviceInfo gpu = cuda::Info(device.index());
  const std::string this_gpu =
      gpu.name + " (sm_" + std::to_string(gpu.sm_major) + std::to_string(gpu.sm_minor) + ")";
  if (precision.recipe == PrecisionRecipe::kBlockwise && gpu.sm_major != 9) {
    throw InputError(prefix +
                     "needs an sm_90 GPU (Hopper: cuBLASLt's 1x128 / 128x128 blockwise FP8 "
                     "scaling), this is " +
                     this_gpu + way_out);
  }
  if (precision.recipe == PrecisionRecipe::kMxfp8) {
    if (gpu.sm_major < 10) {
      throw InputError(prefix +
                       "needs an sm_100 GPU (Blackwell: MX block scaling in the tensor "
                       "cores), this is " +
                       this_gpu + way_out);
    }
    throw InputError(prefix +
                     "is not part of this build: native MX GEMMs have not been "
                     "validated on " +
                     this_gpu + " against the emulation" + way_out);
  }
}

RopeTables MakeRopeTables(int64_t seq_len, int64_t head_dim, double theta,
                          const at::Device& device) {
  const int64_t half = head_dim / 2;
  at::Tensor cos = at::empty({seq_len, half}, at::kFloat);
  at::Tensor sin = at::empty({seq_len, half}, at::kFloat);
  auto c = cos.accessor<float, 2>();
  auto s = sin.accessor<float, 2>();
  for (int64_t i = 0; i < half; ++i) {
    double inv_freq = 1.0 / std::pow(theta, static_cast<double>(2 * i) / head_dim);
    for (int64_t p = 0; p < seq_len; ++p) {
      double angle = static_cast<double>(p) * inv_freq;
      c[p][i] = static_cast<float>(std::cos(angle));
      s[p][i] = static_cast<float>(std::sin(angle));
    }
  }
  return {cos.to(device), sin.to(device)};
}

at::Tensor CausalSelfAttention(const at::Tensor& x, const at::Tensor& qkv_weight,
                               const at::Tensor& proj_weight, int64_t heads, const RopeTables& rope,
                               const PrecisionConfig& precision, const at::Tensor& position_ids,
                               const at::Tensor& padding_mask, double attention_dropout,
                               uint64_t dropout_key) {
  const int64_t b = x.size(0), s = x.size(1), h = x.size(2), d = h / heads;
  at::Tensor qkv = Linear(x, qkv_weight, precision).view({b, s, 3, heads, d});
  std::vector<at::Tensor> parts = qkv.permute({2, 0, 3, 1, 4}).unbind(0);
  RopeTables positioned = rope;
  if (position_ids.defined()) {
    // Each token's row, broadcast over the heads: [b, 1, s, d / 2].
    const at::Tensor rows = position_ids.reshape({-1});
    positioned.cos = rope.cos.index_select(0, rows).view({b, 1, s, d / 2});
    positioned.sin = rope.sin.index_select(0, rows).view({b, 1, s, d / 2});
  }
  at::Tensor q = ApplyRope(parts[0], positioned);
  at::Tensor k = ApplyRope(parts[1], positioned);
  // Scaling and masking work in place on the fp32 scores: neither backward needs the values
  // they overwrite, and the [b, heads, s, s] temporaries are the largest of a layer.
  CountMatmulFlops(q, k.transpose(-2, -1));
  at::Tensor scores = gemm::Matmul(q, k.transpose(-2, -1)).to(at::kFloat);
  scores.mul_(1.0 / std::sqrt(static_cast<double>(d)));
  at::Tensor causal = at::ones({s, s}, scores.options().dtype(at::kBool)).triu(1);
  scores.masked_fill_(causal, -std::numeric_limits<float>::infinity());
  if (padding_mask.defined()) {
    // A query row always keeps key 0 (a sample is at least one token long), so no row is all
    // -inf.
    scores.masked_fill_(padding_mask.view({b, 1, 1, s}), -std::numeric_limits<float>::infinity());
  }
  at::Tensor probs;
  if (torch::GradMode::is_enabled()) {
    probs = at::softmax(scores, -1).to(x.scalar_type());
  } else {
    // Without a graph the fp32 scores are dead after the softmax: compute it in place (the same
    // kernel and arithmetic, so the same bits as the grad-mode path).
    at::_softmax_out(scores, scores, -1, false);
    probs = scores.to(x.scalar_type());
    scores.reset();
  }
  probs = Dropout(probs, attention_dropout, dropout_key);
  CountMatmulFlops(probs, parts[2]);
  at::Tensor context = gemm::Matmul(probs, parts[2]).transpose(1, 2).reshape({b, s, h});
  return Linear(context, proj_weight, precision);
}

at::Tensor SwiGlu(const at::Tensor& x, const at::Tensor& fc1, const at::Tensor& fc2,
                  const at::Tensor& probs, const PrecisionConfig& precision) {
  std::vector<at::Tensor> gate_up = Linear(x, fc1, precision).chunk(2, -1);
  at::Tensor act = at::silu(gate_up[0]) * gate_up[1];
  if (probs.defined()) {
    act = (act.to(at::kFloat) * probs.unsqueeze(-1)).to(x.scalar_type());
  }
  return Linear(act, fc2, precision);
}

namespace {
thread_local DropoutMaskObserver* dropout_mask_observer = nullptr;
}  // namespace

DropoutMaskObserver* SetDropoutMaskObserver(DropoutMaskObserver* observer) {
  DropoutMaskObserver* previous = dropout_mask_observer;
  dropout_mask_observer = observer;
  return previous;
}

at::Tensor Dropout(const at::Tensor& x, double p, uint64_t key) {
  if (p == 0.0) return x;
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(key);
  at::Tensor keep = at::full(x.sizes(), 1.0 - p, at::TensorOptions().dtype(at::kFloat));
  at::Tensor mask = at::bernoulli(keep, gen);
  if (dropout_mask_observer != nullptr) dropout_mask_observer->Observe(key, mask);
  return x * mask.to(x.options()) * (1.0 / (1.0 - p));
}

at::Tensor MaskedCrossEntropy(const at::Tensor& logits, const at::Tensor& labels,
                              const at::Tensor& mask) {
  at::Tensor log_probs = at::log_softmax(logits.to(at::kFloat), -1);
  at::Tensor nll = -log_probs.gather(-1, labels.unsqueeze(-1)).squeeze(-1);
  return (nll * mask).sum() / mask.sum().clamp_min(1.0);
}

at::Tensor RollLeft(const at::Tensor& t, int64_t shift, double fill) {
  const int64_t s = t.size(1);
  if (shift <= 0) return t;
  if (shift >= s) return at::full_like(t, fill);
  at::Tensor tail = at::full({t.size(0), shift}, fill, t.options());
  return at::cat({t.narrow(1, shift, s - shift), tail}, 1);
}

std::vector<at::Tensor> Fanout(const at::Tensor& x, int64_t count) {
  return FanoutFunction::apply(x, count);
}

at::Tensor AttachAuxLoss(const at::Tensor& probs, const at::Tensor& aux_loss, double grad_scale) {
  return AuxLossScaler::apply(probs, aux_loss, grad_scale);
}

}  // namespace ops
}  // namespace bitparity

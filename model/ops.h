#ifndef BITPARITY_MODEL_OPS_H_
#define BITPARITY_MODEL_OPS_H_

// Op-level building blocks shared by both arms. Every op is deterministic on CPU for a fixed
// thread count, and every op whose input is used several times internally is a single autograd
// node (RmsNorm), so that a tensor crossing a node boundary receives one gradient contribution
// per use (docs/design.md, the rules of parity).

#include <ATen/ATen.h>

#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "config/recipe.h"

namespace torch {
namespace autograd {
struct AutogradContext;
}  // namespace autograd
}  // namespace torch

namespace bitparity {
namespace ops {

// y = x * rsqrt(mean(x^2) + eps) * weight, computed in fp32 and returned in x's dtype, as one
// autograd node with a hand-written backward.
at::Tensor RmsNorm(const at::Tensor& x, const at::Tensor& weight, double eps);

// RMSNorm from elementary ops, so that its input is reached by two autograd edges (pow and mul)
// whose gradients the autograd engine adds in an order of its own: the silent bug that
// ModelBugs::composite_rms_norm re-creates. Tests only.
at::Tensor CompositeRmsNorm(const at::Tensor& x, const at::Tensor& weight, double eps);

// x @ weight^T. The precision seam: every GEMM of a linear layer goes through here, so FP8
// recipes can quantize the operands of the forward, dgrad and wgrad GEMMs in one place.
// FP8 GEMMs are emulated (quantize-dequantize, bf16 GEMM) or, with fp8_backend "native" on a
// GPU, FP8 tensor-core GEMMs on the same quantized operands. bf16 and emulated GEMMs run on the
// process's GEMM path (model/gemm.h).
at::Tensor Linear(const at::Tensor& x, const at::Tensor& weight, const PrecisionConfig& precision);

// Weight gradients left for later (Megatron's --delay-wgrad-compute): while a DelayWgradScope is
// alive on a thread, every Linear that runs there with gradients on splits its backward: the
// input gradient when autograd reaches it, the weight gradient into the scope's DelayedWgrads,
// computed when the schedule runs them (where Megatron calls backward_dw, under another
// microbatch's all-to-all). The GEMMs are the ones an undelayed linear layer runs, operand for
// operand, and Run adds each result to its weight's .grad as autograd would; so the bits do not
// change, only when the work happens.
class DelayedWgrads {
 public:
  // One pending weight gradient: `compute` returns it; it goes to `weight`'s .grad.
  void Push(const at::Tensor& weight, std::function<at::Tensor()> compute);
  // Computes the pending weight gradients in the order they were left and accumulates each into
  // its weight's .grad (set when undefined, else added in place).
  void Run();
  // Run() for the pending weight gradients whose weight `selects` takes; the others stay pending,
  // in order. For the memory probe, which measures what each node's delayed gradients hold.
  void RunSelected(const std::function<bool(const at::Tensor& weight)>& selects);
  bool empty() const;
  size_t size() const;

 private:
  struct Pending {
    at::Tensor weight;
    std::function<at::Tensor()> compute;
  };
  mutable std::mutex mutex_;  // a GPU's backward runs on the autograd engine's thread
  std::vector<Pending> pending_;
};

// While alive, the thread's Linear layers run with gradients on leave their weight gradients to
// `sink` (nullptr: none).
class DelayWgradScope {
 public:
  explicit DelayWgradScope(DelayedWgrads* sink);
  ~DelayWgradScope();
  DelayWgradScope(const DelayWgradScope&) = delete;
  DelayWgradScope& operator=(const DelayWgradScope&) = delete;

 private:
  DelayedWgrads* previous_;
};

// The sink of the thread's innermost DelayWgradScope as a number an autograd Function keeps in
// its context for its backward (which may run on another thread; 0: none), and back.
int64_t CurrentWgradSinkHandle();
DelayedWgrads* WgradSinkOf(int64_t handle);

// A linear layer's weight gradient from its backward: `compute`d now and returned, or, when
// `sink_handle` (its forward's CurrentWgradSinkHandle) names a sink, left to it (undefined).
at::Tensor WeightGradientNowOrLater(int64_t sink_handle, const at::Tensor& weight,
                                    std::function<at::Tensor()> compute);

// What a linear layer's autograd Function (the bf16 / fp32 one of Linear, FP8's in
// model/fp8_linear.cpp) keeps from its forward for its backward: x folded to rows [rows, k], the
// weight [n, k], and the wgrad sink its forward saw.
struct SavedLinear {
  at::Tensor x2;
  at::Tensor weight;
  int64_t wgrad_sink = 0;
};

// Folds x to rows, saves them with the weight and CurrentWgradSinkHandle() in `ctx`, and returns
// the rows; SavedLinearOf reads them back in the backward.
at::Tensor SaveLinearInputs(torch::autograd::AutogradContext* ctx, const at::Tensor& x,
                            const at::Tensor& weight);
SavedLinear SavedLinearOf(torch::autograd::AutogradContext* ctx);

// `sizes` with its last dimension replaced by `last`: a linear layer's output shape from its
// input's (last = n), and its input gradient's from the output gradient's (last = k).
std::vector<int64_t> WithLastDimension(at::IntArrayRef sizes, int64_t last);

// Counts (numerics/flop_count.h) the GEMM x @ weight^T, x: [..., k], weight: [n, k]; and the
// batched product a @ b, a: [..., m, k], b: [..., k, n] (b broadcast over a's batch). With
// gradients on, one backward GEMM per operand that requires a gradient. Linear and
// CausalSelfAttention count their own; a caller that runs a GEMM of its own (the router, mHC)
// counts it with these.
void CountLinearFlops(const at::Tensor& x, const at::Tensor& weight);
void CountMatmulFlops(const at::Tensor& a, const at::Tensor& b);

// Native FP8 GEMMs exist for the blockwise recipe on sm_90 (cuBLASLt's 1x128 / 128x128
// scaling); InputError naming `where` (the recipe table) and the way out otherwise. Nothing to
// check for emulated or non-FP8 precision.
void CheckNativeFp8Support(const PrecisionConfig& precision, const at::Device& device,
                           const std::string& where);

// Rotary position tables for one sequence length: cos and sin of shape [seq, head_dim / 2].
struct RopeTables {
  at::Tensor cos;
  at::Tensor sin;
};
// Computed on the CPU (the same bits everywhere) and placed on `device`.
RopeTables MakeRopeTables(int64_t seq_len, int64_t head_dim, double theta,
                          const at::Device& device = at::kCPU);

// Causal multi-head self-attention with rotary positions and an unfused softmax in fp32.
// x: [b, s, h] already normalized; returns [b, s, h] before the output projection's residual.
// `position_ids` ([b, s] int64) picks each token's row of the rotary tables (undefined: row t
// for token t; the same bits as the same positions given explicitly); keys where
// `padding_mask` ([b, s] bool) is true are skipped (undefined: none). `attention_dropout` drops
// attention probabilities with the mask of `dropout_key`.
at::Tensor CausalSelfAttention(const at::Tensor& x, const at::Tensor& qkv_weight,
                               const at::Tensor& proj_weight, int64_t heads, const RopeTables& rope,
                               const PrecisionConfig& precision,
                               const at::Tensor& position_ids = at::Tensor(),
                               const at::Tensor& padding_mask = at::Tensor(),
                               double attention_dropout = 0.0, uint64_t dropout_key = 0);

// fc2(silu(gate) * up) with [gate; up] = fc1(x). When `probs` is defined (one per row), the
// SwiGLU output is scaled by it in fp32 before fc2, as Megatron's weighted experts do.
at::Tensor SwiGlu(const at::Tensor& x, const at::Tensor& fc1, const at::Tensor& fc2,
                  const at::Tensor& probs, const PrecisionConfig& precision);

// Inverted dropout whose mask depends only on `key` (never on call order), so replays and
// interleaved microbatches draw identical masks; drawn on the CPU, so every device draws the same
// mask. Identity when p == 0.
at::Tensor Dropout(const at::Tensor& x, double p, uint64_t key);

// Sees every dropout mask drawn on the thread that installed it (SetDropoutMaskObserver): the
// tests that count mask elements differing between a first pass and its replay, or between
// arms.
class DropoutMaskObserver {
 public:
  virtual ~DropoutMaskObserver() = default;
  // `mask` holds 1 where an element is kept, 0 where it is dropped (CPU, fp32).
  virtual void Observe(uint64_t key, const at::Tensor& mask) = 0;
};

// Installs `observer` (nullptr: none) on this thread; returns the one it replaces.
DropoutMaskObserver* SetDropoutMaskObserver(DropoutMaskObserver* observer);

// Mean cross-entropy over the tokens where `mask` is 1, in fp32. logits: [b, s, vocab].
at::Tensor MaskedCrossEntropy(const at::Tensor& logits, const at::Tensor& labels,
                              const at::Tensor& mask);

// Shifts [b, s] left along the sequence by `shift`, filling the tail with `fill`.
at::Tensor RollLeft(const at::Tensor& t, int64_t shift, double fill);

// `count` copies of `x` for `count` consumers, as one autograd node whose backward sums the
// copies' gradients in copy order (an undefined one is skipped): the explicit accumulation order
// where three or more gradient contributions meet (ordinary autograd would add them in an order
// of its own, which differs between one graph and node-by-node backward).
std::vector<at::Tensor> Fanout(const at::Tensor& x, int64_t count);

// Identity on `probs` in forward; in backward also emits `grad_scale` as the gradient of
// `aux_loss`, so the load-balancing loss trains the router without being added to the loss
// (Megatron's MoEAuxLossAutoScaler). A recompute replay therefore injects it exactly once.
at::Tensor AttachAuxLoss(const at::Tensor& probs, const at::Tensor& aux_loss, double grad_scale);

}  // namespace ops
}  // namespace bitparity

#endif  // BITPARITY_MODEL_OPS_H_

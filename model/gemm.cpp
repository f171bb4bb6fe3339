#include "model/gemm.h"

#include <torch/torch.h>

#include <atomic>
#include <stdexcept>

#include "numerics/determinism.h"

namespace bitparity {
namespace gemm {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

constexpr int kNoOverride = -1;
std::atomic<int> g_path_override{kNoOverride};

// LibTorch's own GEMM for the operands' dtype and device.
class LibTorchGemm : public GemmKernel {
 public:
  at::Tensor Multiply(const at::Tensor& a, const at::Tensor& b) const override {
    return at::matmul(a, b);
  }
};

// bf16 on the CPU: both operands up-cast to fp32 (every bf16 value is an fp32 value), one fp32
// GEMM, the fp32 result rounded to nearest even in bf16. Other dtypes and devices as LibTorch.
class Fp32AccumulateGemm : public GemmKernel {
 public:
  at::Tensor Multiply(const at::Tensor& a, const at::Tensor& b) const override {
    if (a.scalar_type() != at::kBFloat16 || !a.is_cpu()) return at::matmul(a, b);
    return at::matmul(a.to(at::kFloat), b.to(at::kFloat)).to(at::kBFloat16);
  }
};

at::Tensor TransposedLast(const at::Tensor& t) { return t.transpose(-2, -1); }

class MatmulFunction : public torch::autograd::Function<MatmulFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& a, const at::Tensor& b) {
    ctx->save_for_backward({a, b});
    return Multiply(a, b);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    variable_list saved = ctx->get_saved_variables();
    const at::Tensor g = grads[0].to(saved[0].scalar_type());
    at::Tensor da, db;
    if (ctx->needs_input_grad(0)) da = Multiply(g, TransposedLast(saved[1]));
    if (ctx->needs_input_grad(1)) db = Multiply(TransposedLast(saved[0]), g);
    return {da, db};
  }
};

}  // namespace

GemmPath ActivePath() {
  const int forced = g_path_override.load();
  return forced == kNoOverride ? PinOf(PinnedCpuIsa()).bf16_gemm : static_cast<GemmPath>(forced);
}

ScopedGemmPath::ScopedGemmPath(GemmPath path)
    : previous_(g_path_override.exchange(static_cast<int>(path))) {}

ScopedGemmPath::~ScopedGemmPath() { g_path_override.store(previous_); }

const GemmKernel& KernelFor(GemmPath path) {
  static const LibTorchGemm kLibTorch;
  static const Fp32AccumulateGemm kFp32Accumulate;
  switch (path) {
    case GemmPath::kNative:
      return kLibTorch;
    case GemmPath::kFp32Accumulate:
      return kFp32Accumulate;
  }
  throw std::logic_error("gemm::KernelFor: a GemmPath without a kernel");
}

at::Tensor Multiply(const at::Tensor& a, const at::Tensor& b) {
  return KernelFor(ActivePath()).Multiply(a, b);
}

at::Tensor Matmul(const at::Tensor& a, const at::Tensor& b) { return MatmulFunction::apply(a, b); }

}  // namespace gemm
}  // namespace bitparity

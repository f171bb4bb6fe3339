#ifndef BITPARITY_MODEL_GEMM_H_
#define BITPARITY_MODEL_GEMM_H_

// The model's GEMMs, computed the way the process's pinned CPU level says (numerics/cpu_isa.h):
// with bf16 operands on the CPU either LibTorch's own bf16 GEMM (GemmPath::kNative, oneDNN: the
// host's best kernel) or one fp32 GEMM over the exactly up-cast operands whose result is rounded
// to bf16 (GemmPath::kFp32Accumulate: what a bf16 GEMM with fp32 accumulation computes, through
// the pinned MKL branch, so the same bits on every host). fp32 operands and GPU tensors always
// take LibTorch's own GEMM. Every GEMM of a linear layer, of attention and of the FP8 emulation
// goes through here; the router's and mHC's fp32 GEMMs are LibTorch's.

#include <ATen/ATen.h>

#include "numerics/cpu_isa.h"

namespace bitparity {
namespace gemm {

// The path of this process: the pinned level's (numerics/determinism.h PinnedCpuIsa), unless a
// ScopedGemmPath says otherwise.
GemmPath ActivePath();

// Tests: while alive, every thread of the process computes GEMMs on `path`.
class ScopedGemmPath {
 public:
  explicit ScopedGemmPath(GemmPath path);
  ~ScopedGemmPath();
  ScopedGemmPath(const ScopedGemmPath&) = delete;
  ScopedGemmPath& operator=(const ScopedGemmPath&) = delete;

 private:
  int previous_;
};

// One way to compute a @ b.
class GemmKernel {
 public:
  virtual ~GemmKernel() = default;
  // a: [..., m, k], b: [..., k, n] with equal leading dimensions (or none), both of one dtype;
  // the product in that dtype. No autograd graph.
  virtual at::Tensor Multiply(const at::Tensor& a, const at::Tensor& b) const = 0;
};

// The kernel of `path`.
const GemmKernel& KernelFor(GemmPath path);

// a @ b on the active path, without a graph (inside an autograd Function's forward or backward).
at::Tensor Multiply(const at::Tensor& a, const at::Tensor& b);

// a @ b on the active path as one autograd node: its backward computes g @ b^T and a^T @ g on the
// same path. Shapes as GemmKernel::Multiply.
at::Tensor Matmul(const at::Tensor& a, const at::Tensor& b);

}  // namespace gemm
}  // namespace bitparity

#endif  // BITPARITY_MODEL_GEMM_H_

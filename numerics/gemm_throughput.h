#ifndef BITPARITY_NUMERICS_GEMM_THROUGHPUT_H_
#define BITPARITY_NUMERICS_GEMM_THROUGHPUT_H_

// The GEMM throughput this process gets, measured rather than assumed: the ceiling that MFU
// (model FLOPs per second over it) is against. A rank measures it once before its first iteration
// with its own intra-op threads and device, so the figure is what this rank could do at best on
// this machine, as loaded as it is when the rank trains.

#include <ATen/ATen.h>

#include <cstdint>
#include <functional>
#include <string>

namespace bitparity {

struct GemmShape {
  int64_t m = 0;
  int64_t n = 0;
  int64_t k = 0;
  int64_t flops() const { return 2 * m * n * k; }
};

// Computes a @ b (a: [m, k], b: [k, n]); empty: LibTorch's own mm.
using GemmFunction = std::function<at::Tensor(const at::Tensor& a, const at::Tensor& b)>;

struct GemmThroughput {
  GemmShape shape;
  at::ScalarType dtype = at::kBFloat16;
  std::string path;     // how the GEMM was computed, when not LibTorch's own mm ("" otherwise)
  std::string device;   // "cpu", "cuda:0"
  int64_t threads = 0;  // intra-op threads (CPU)
  int64_t repetitions = 0;
  double best_seconds = 0;    // the fastest repetition
  double median_seconds = 0;  // the median repetition
  double best_flops_per_second() const;
  // "bf16 1024x1024x1024 on cpu, 1 thread: 412.3 GFLOP/s" (with the path after the dtype).
  std::string Describe() const;
};

// Times [m, k] x [k, n] products (x @ w^T, as a linear layer runs them) of `dtype` on `device`
// after one warm-up, at least 3 and until `budget_seconds` of GEMM time have passed (at most
// 1000). The operands hold fixed values (no RNG is drawn). `multiply` computes each product
// (named `path` in the result); empty: LibTorch's mm.
GemmThroughput MeasureGemm(const GemmShape& shape, at::ScalarType dtype, const at::Device& device,
                           double budget_seconds, const GemmFunction& multiply = {},
                           const std::string& path = "");

// The ceiling a rank measures: a square GEMM of 512 (CPU) or 8192 (GPU) in the dtype the
// recipe's GEMMs run in (bf16, or fp32 for the fp32 recipe; emulated FP8 GEMMs are bf16 GEMMs),
// computed as the model computes its GEMMs (`multiply`, named `path`).
GemmThroughput MeasureGemmCeiling(at::ScalarType dtype, const at::Device& device,
                                  const GemmFunction& multiply = {}, const std::string& path = "");

}  // namespace bitparity

#endif  // BITPARITY_NUMERICS_GEMM_THROUGHPUT_H_

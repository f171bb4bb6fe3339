#include "numerics/gemm_throughput.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

namespace bitparity {

double GemmThroughput::best_flops_per_second() const {
  return best_seconds > 0 ? static_cast<double>(shape.flops()) / best_seconds : 0;
}

std::string GemmThroughput::Describe() const {
  char line[224];
  const std::string type = std::string(dtype == at::kBFloat16 ? "bf16" : c10::toString(dtype)) +
                           (path.empty() ? "" : " (" + path + ")");
  std::snprintf(line, sizeof(line), "%s %lldx%lldx%lld on %s, %lld thread%s: %.1f GFLOP/s",
                type.c_str(), static_cast<long long>(shape.m), static_cast<long long>(shape.n),
                static_cast<long long>(shape.k), device.c_str(), static_cast<long long>(threads),
                threads == 1 ? "" : "s", best_flops_per_second() / 1e9);
  return line;
}

GemmThroughput MeasureGemm(const GemmShape& shape, at::ScalarType dtype, const at::Device& device,
                           double budget_seconds, const GemmFunction& multiply,
                           const std::string& path) {
  const auto options = at::TensorOptions().dtype(dtype).device(device);
  // Fixed, varied values: a ramp folded into [-1, 1) (zeros could take a fast path somewhere).
  auto operand = [&](int64_t rows, int64_t cols) {
    return (at::arange(rows * cols, at::TensorOptions().dtype(at::kFloat)).remainder(17.0) / 8.5 -
            1.0)
        .view({rows, cols})
        .to(options);
  };
  const at::Tensor x = operand(shape.m, shape.k);
  const at::Tensor w = operand(shape.n, shape.k);
  at::Tensor y = at::empty({shape.m, shape.n}, options);
  auto run_once = [&] {
    const auto start = std::chrono::steady_clock::now();
    if (multiply) {
      y = multiply(x, w.t());
    } else {
      at::mm_out(y, x, w.t());
    }
    if (device.is_cuda()) (void)y.view(-1)[0].item<float>();  // waits for the GEMM
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  run_once();  // warm-up: packing buffers, cuBLAS handles, clocks
  std::vector<double> times;
  double spent = 0;
  while (times.size() < 3 || (spent < budget_seconds && times.size() < 1000)) {
    times.push_back(run_once());
    spent += times.back();
  }
  std::sort(times.begin(), times.end());
  GemmThroughput out;
  out.shape = shape;
  out.dtype = dtype;
  out.path = multiply ? path : "";
  out.device = device.str();
  out.threads = at::get_num_threads();
  out.repetitions = static_cast<int64_t>(times.size());
  out.best_seconds = times.front();
  out.median_seconds = times[times.size() / 2];
  return out;
}

GemmThroughput MeasureGemmCeiling(at::ScalarType dtype, const at::Device& device,
                                  const GemmFunction& multiply, const std::string& path) {
  const int64_t side = device.is_cuda() ? 8192 : 512;
  return MeasureGemm({side, side, side}, dtype, device, device.is_cuda() ? 0.05 : 0.15, multiply,
                     path);
}

}  // namespace bitparity

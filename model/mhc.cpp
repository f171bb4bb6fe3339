#include "model/mhc.h"

#include <vector>

#include "model/ops.h"

namespace bitparity {
namespace {

constexpr double kRmsEps = 1e-6;
constexpr double kPreFloor = 1e-6;
constexpr double kSinkhornEps = 1e-6;

// x * rsqrt(mean(x^2) + eps) over the last dimension, in fp32, as one autograd node.
at::Tensor UnweightedRms(const at::Tensor& x) {
  at::Tensor xf = x.to(at::kFloat);
  return ops::RmsNorm(xf, at::ones({x.size(-1)}, xf.options()), kRmsEps);
}

}  // namespace

MhcMapping ComputeMhcMapping(const at::Tensor& streams, const MhcWeights& w, int64_t n,
                             int64_t sinkhorn_iterations) {
  const int64_t b = streams.size(0), s = streams.size(1);
  at::Tensor logits;  // [b, s, n^2 + 2n]
  {
    const at::Tensor normed = UnweightedRms(streams);
    ops::CountLinearFlops(normed, w.mapping);
    logits = at::matmul(normed, w.mapping.t());
  }
  std::vector<at::Tensor> parts = logits.split_with_sizes({n, n, n * n}, -1);
  std::vector<at::Tensor> bias = w.bias.split_with_sizes({n, n, n * n}, -1);
  MhcMapping m;
  m.pre = at::sigmoid(parts[0] * w.alpha_pre + bias[0]) + kPreFloor;
  m.post = at::sigmoid(parts[1] * w.alpha_post + bias[1]) * 2.0;
  // Sinkhorn-Knopp: a positive matrix (row softmax), then alternately its columns and its rows
  // scaled to sum to one.
  at::Tensor res =
      at::softmax((parts[2] * w.alpha_res + bias[2]).view({b, s, n, n}), -1) + kSinkhornEps;
  for (int64_t i = 0; i < sinkhorn_iterations; ++i) {
    res = res / res.sum(-2, /*keepdim=*/true);
    res = res / res.sum(-1, /*keepdim=*/true);
  }
  m.res = res;
  return m;
}

at::Tensor MhcAggregate(const at::Tensor& streams, const at::Tensor& pre, int64_t n) {
  const int64_t b = streams.size(0), s = streams.size(1), h = streams.size(2) / n;
  at::Tensor weighted = streams.view({b, s, n, h}).to(at::kFloat) * pre.unsqueeze(-1);
  return weighted.sum(2).to(streams.scalar_type());
}

at::Tensor MhcUpdate(const at::Tensor& streams, const at::Tensor& output, const MhcMapping& mapping,
                     int64_t n) {
  const int64_t b = streams.size(0), s = streams.size(1), h = streams.size(2) / n;
  at::Tensor mixed;
  {
    const at::Tensor mix = mapping.res.transpose(-1, -2);
    const at::Tensor per_stream = streams.view({b, s, n, h}).to(at::kFloat);
    ops::CountMatmulFlops(mix, per_stream);
    mixed = at::matmul(mix, per_stream);
  }
  at::Tensor expanded = mapping.post.unsqueeze(-1) * output.to(at::kFloat).unsqueeze(2);
  return (mixed + expanded).reshape({b, s, n * h}).to(streams.scalar_type());
}

at::Tensor MhcExpand(const at::Tensor& x, int64_t n) {
  const int64_t b = x.size(0), s = x.size(1), h = x.size(2);
  return x.unsqueeze(2).expand({b, s, n, h}).reshape({b, s, n * h});
}

at::Tensor MhcContract(const at::Tensor& streams, const MhcContractWeights& w, int64_t n) {
  const int64_t b = streams.size(0), s = streams.size(1), h = streams.size(2) / n;
  at::Tensor gate;
  {
    const at::Tensor normed = UnweightedRms(streams);
    ops::CountLinearFlops(normed, w.fn);
    gate = at::sigmoid(at::matmul(normed, w.fn.t()) * w.scale + w.base);
  }
  at::Tensor weighted = streams.view({b, s, n, h}).to(at::kFloat) * gate.unsqueeze(-1);
  return weighted.sum(2).to(streams.scalar_type());
}

}  // namespace bitparity

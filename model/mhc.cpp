#include "model/mhc.h"

#include <cmath>
#include <tuple>
#include <vector>

#include "model/ops.h"

namespace bitparity {
namespace {

constexpr double kNormEps = 1e-6;      // Megatron's norm_eps: 1 / (rms + eps)
constexpr double kSinkhornEps = 1e-6;  // Megatron's SinkhornKnopp.eps: the floor of each sum

// Sinkhorn-Knopp as Megatron's SinkhornKnopp: exp of the logits less their row maximum (the
// shift detached: Megatron's backward is d/dlogits = dL/dM_init * M_init), then per iteration
// the rows, then the columns scaled to sum to one, each sum floored at eps. Ends on the columns.
at::Tensor SinkhornKnopp(const at::Tensor& logits, int64_t iterations) {
  at::Tensor m = at::exp(logits - std::get<0>(logits.max(-1, /*keepdim=*/true)).detach());
  for (int64_t i = 0; i < iterations; ++i) {
    m = m / m.sum(-1, /*keepdim=*/true).clamp_min(kSinkhornEps);
    m = m / m.sum(-2, /*keepdim=*/true).clamp_min(kSinkhornEps);
  }
  return m;
}

}  // namespace

MhcMapping ComputeMhcMapping(const at::Tensor& streams, const MhcWeights& w, int64_t n,
                             int64_t sinkhorn_iterations) {
  const int64_t b = streams.size(0), s = streams.size(1);
  at::Tensor scaled;  // [b, s, n^2 + 2n]: r * (streams @ mapping^T)
  {
    // Megatron's _projection_and_get_norm: r = 1 / (||x|| / sqrt(nC) + eps), the projection of
    // the streams as they are; _compute_h scales it by r.
    const at::Tensor xf = streams.to(at::kFloat);
    const double columns = static_cast<double>(xf.size(-1));
    const at::Tensor rms =
        at::linalg_vector_norm(xf, 2, {-1}, /*keepdim=*/true) / std::sqrt(columns);
    const at::Tensor r = at::reciprocal(rms + kNormEps);
    ops::CountLinearFlops(xf, w.mapping);
    scaled = r * at::matmul(xf, w.mapping.t());
  }
  std::vector<at::Tensor> parts = scaled.split_with_sizes({n, n, n * n}, -1);
  std::vector<at::Tensor> bias = w.bias.split_with_sizes({n, n, n * n}, -1);
  MhcMapping m;
  m.pre = at::sigmoid(parts[0] * w.alpha_pre + bias[0]);
  m.post = at::sigmoid(parts[1] * w.alpha_post + bias[1]) * 2.0;
  m.res = SinkhornKnopp((parts[2] * w.alpha_res + bias[2]).view({b, s, n, n}), sinkhorn_iterations);
  return m;
}

at::Tensor MhcAggregate(const at::Tensor& streams, const at::Tensor& pre, int64_t n) {
  const int64_t b = streams.size(0), s = streams.size(1), h = streams.size(2) / n;
  const at::Tensor weights = pre.to(streams.scalar_type()).unsqueeze(-1);
  return (streams.view({b, s, n, h}) * weights).sum(2);
}

at::Tensor MhcUpdate(const at::Tensor& streams, const at::Tensor& output, const MhcMapping& mapping,
                     int64_t n) {
  const int64_t b = streams.size(0), s = streams.size(1), h = streams.size(2) / n;
  const at::ScalarType dtype = streams.scalar_type();
  at::Tensor mixed;
  {
    const at::Tensor mix = mapping.res.to(dtype);
    const at::Tensor per_stream = streams.view({b, s, n, h});
    ops::CountMatmulFlops(mix, per_stream);
    mixed = at::matmul(mix, per_stream);
  }
  const at::Tensor expanded = mapping.post.to(dtype).unsqueeze(-1) * output.unsqueeze(2);
  return (mixed + expanded).reshape({b, s, n * h});
}

at::Tensor MhcExpand(const at::Tensor& x, int64_t n) {
  const int64_t b = x.size(0), s = x.size(1), h = x.size(2);
  return x.unsqueeze(2).expand({b, s, n, h}).reshape({b, s, n * h});
}

at::Tensor MhcContract(const at::Tensor& streams, int64_t n) {
  const int64_t b = streams.size(0), s = streams.size(1), h = streams.size(2) / n;
  return streams.view({b, s, n, h}).mean(2);
}

}  // namespace bitparity

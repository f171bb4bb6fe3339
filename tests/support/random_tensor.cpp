#include "tests/support/random_tensor.h"

#include "numerics/random.h"

namespace bitparity::testing {

at::Tensor RandomNormal(const std::vector<int64_t>& shape, uint64_t seed, uint64_t stream,
                        double scale) {
  at::Tensor t = at::empty(shape, at::kFloat);
  Rng rng(seed, {stream});
  float* data = t.data_ptr<float>();
  for (int64_t i = 0; i < t.numel(); ++i) data[i] = static_cast<float>(rng.Normal() * scale);
  return t;
}

}  // namespace bitparity::testing

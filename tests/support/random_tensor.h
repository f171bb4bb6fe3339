#ifndef BITPARITY_TESTS_SUPPORT_RANDOM_TENSOR_H_
#define BITPARITY_TESTS_SUPPORT_RANDOM_TENSOR_H_

// Test tensors with reproducible contents: standard normal values (times `scale`) from the
// project's own RNG, keyed by a seed and a stream, so that every test gets the same bits on every
// machine and LibTorch.

#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

namespace bitparity::testing {

// A CPU fp32 tensor of `shape`.
at::Tensor RandomNormal(const std::vector<int64_t>& shape, uint64_t seed, uint64_t stream,
                        double scale = 1.0);

}  // namespace bitparity::testing

#endif  // BITPARITY_TESTS_SUPPORT_RANDOM_TENSOR_H_
